// SPDX-License-Identifier: MIT
// The contract the trace tests run transactions through: calls nested
// with value and logs, failures inside calls the caller survives (a
// revert, an invalid opcode, gas run out) and one it does not, contracts
// made and destroyed in one transaction, slots cleared for refunds,
// precompiles and other accounts read. Compiled into `Tracee.bin` with
// `solcjs --optimize --bin Tracee.sol` (solc 0.8.30).
pragma solidity ^0.8.30;

contract Child {
    event Born(address at, uint256 value);

    constructor() payable {
        emit Born(address(this), msg.value);
    }

    function die(address payable to) external {
        selfdestruct(to);
    }

    function boom() external pure {
        assembly {
            invalid()
        }
    }
}

contract Tracee {
    mapping(uint256 => uint256) public slots;

    event Step(uint256 indexed depth, uint256 value);

    function fan(uint256 depth) external payable {
        slots[depth] = block.number + depth;
        emit Step(depth, msg.value);
        if (depth > 0) {
            this.fan{value: msg.value / 2}(depth - 1);
        }
    }

    function fail(uint256 mode) external {
        if (mode == 0) {
            try this.revertWith("nope") {} catch {}
        } else if (mode == 1) {
            try new Child().boom() {} catch {}
        } else if (mode == 2) {
            try this.burn{gas: 30000}() {} catch {}
        } else if (mode == 3) {
            this.revertWith("whole");
        }
        slots[100 + mode] = mode + 1;
    }

    function revertWith(string calldata why) external pure {
        revert(why);
    }

    function burn() external {
        for (uint256 i = 0; ; i++) {
            slots[1000 + i] = i + 1;
        }
    }

    function make(bytes32 salt) external payable {
        Child a = new Child{value: msg.value / 2}();
        Child b = new Child{salt: salt}();
        a.die(payable(msg.sender));
        b.die(payable(address(this)));
    }

    function tidy(uint256 from, uint256 to) external {
        for (uint256 i = from; i < to; i++) {
            delete slots[i];
        }
    }

    function peek(address who) external returns (bytes32) {
        (, bytes memory echoed) = address(4).staticcall(abi.encode(who));
        bytes32 digest = sha256(abi.encode(who.balance, who.code.length, who.codehash, echoed));
        slots[2000] = uint256(digest);
        return digest;
    }

    receive() external payable {}
}

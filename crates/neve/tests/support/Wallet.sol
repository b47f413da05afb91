// SPDX-License-Identifier: MIT
// The token the simulation tests preview a wallet's transactions on: an
// ERC-20's balances and allowances (balances debited, so a transfer of a
// whole balance deletes its slot), and a payable forwarder for value moved
// inside a call. Compiled into `support/simulate.rs` with
// `solcjs --optimize --bin-runtime --bin Wallet.sol` (solc 0.8.30).
pragma solidity ^0.8.30;

contract Wallet {
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    constructor(address[] memory holders, uint256 amount) {
        for (uint256 i = 0; i < holders.length; i++) {
            balanceOf[holders[i]] = amount;
            emit Transfer(address(0), holders[i], amount);
        }
    }

    function transfer(address to, uint256 value) external returns (bool) {
        require(balanceOf[msg.sender] >= value, "balance");
        balanceOf[msg.sender] -= value;
        balanceOf[to] += value;
        emit Transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        require(allowance[from][msg.sender] >= value, "allowance");
        require(balanceOf[from] >= value, "balance");
        allowance[from][msg.sender] -= value;
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
        return true;
    }

    function pay(address payable to) external payable {
        to.transfer(msg.value);
    }
}

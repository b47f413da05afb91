"""paradigm's cryo (PyPI) extracting trace datasets through neve and
straight from geth: the same rows, compared as sorted rows.

  python cryo-check.py NEVE_URL GETH_URL FIRST LAST [DATASET...]

Blocks FIRST to LAST inclusive. Prints a JSON summary (rows per dataset);
exits 1 naming the first dataset whose rows differ.
"""

import json
import sys

import cryo

DATASETS = [
    "geth_calls",
    "geth_balance_diffs",
    "geth_storage_diffs",
    "geth_nonce_diffs",
    "geth_code_diffs",
    "geth_opcodes",
]


def rows(dataset, url, first, last):
    frame = cryo.collect(
        dataset, blocks=[f"{first}:{last + 1}"], rpc=url, output_format="pandas"
    )
    columns = sorted(frame.columns)
    return columns, sorted(
        tuple(repr(record[c]) for c in columns) for record in frame.to_dict("records")
    )


def main():
    neve, geth, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    summary = {}
    for dataset in sys.argv[5:] or DATASETS:
        ours = rows(dataset, neve, first, last)
        theirs = rows(dataset, geth, first, last)
        if ours != theirs:
            extra = [r for r in ours[1] if r not in theirs[1]][:3]
            missing = [r for r in theirs[1] if r not in ours[1]][:3]
            print(json.dumps({"differs": dataset, "columns": [ours[0], theirs[0]],
                              "rows": [len(ours[1]), len(theirs[1])],
                              "only_neve": extra, "only_geth": missing}))
            sys.exit(1)
        summary[dataset] = len(ours[1])
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

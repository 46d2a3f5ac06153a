"""Phonetisaurus alone on the CMUdict split (keras_attention.g2p.peer).

python -m examples.g2p.cmudict_peer [--out DIR]
"""

import argparse
import json
import os

from examples.g2p import data
from keras_attention.g2p import peer


def main(argv=None):
    parser = argparse.ArgumentParser(description="Phonetisaurus on the CMUdict split")
    parser.add_argument("--out", default="runs/g2p_phonetisaurus")
    args = parser.parse_args(argv)
    split = data.cmudict_split()
    train = {**split["train"], **split["dev"]}
    result = peer.phonetisaurus(train, split["test"], args.out)
    print(json.dumps(result, indent=1))
    with open(os.path.join(args.out, "results.json"), "w") as file:
        json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()

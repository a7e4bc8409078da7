"""python -m inferlab.bench engine ...   (the same as ``inferlab bench engine ...``)"""
import sys

from inferlab.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))

"""pytest collects the notebooks (nbval): run them in smoke mode, small and fast."""
import os

os.environ["INFERLAB_SMOKE"] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

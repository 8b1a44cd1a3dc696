import os
import sys

# ddp_workers and tests_support must import by name in spawned worker processes too
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

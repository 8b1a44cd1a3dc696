"""``python -m pipelines`` was the ``baton`` command before the commands moved to their own floor: it names
the new spelling (one line, exit status 2)."""
import sys

sys.stderr.write("baton: the command moved: run `baton ...` or `python -m commands ...` (python -m pipelines is "
                 "gone since the commands got their own package, commands/)\n")
sys.exit(2)

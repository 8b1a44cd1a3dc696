"""The documented commands of the pages that stand alone (none uses what another page's commands made), run
as written in a directory of their own: the other half of ``test_doc_commands.py``, in a file of its own so
that pytest-xdist runs the two side by side."""
from __future__ import annotations

import pytest

from test_doc_commands import ALL_BLOCKS, CHAINED, make_workdir, run_block

PAGE_BLOCKS = [b for b in ALL_BLOCKS if b[0].rsplit("-", 1)[0] not in CHAINED]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return make_workdir(tmp_path_factory, "docs_pages_commands")


@pytest.mark.distributed
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,block,earlier", PAGE_BLOCKS, ids=[b[0] for b in PAGE_BLOCKS])
def test_documented_commands_of_standalone_pages_run_as_written(name, block, earlier, workdir):
    run_block(name, block, earlier, workdir)


def test_the_two_groups_hold_every_block_once():
    from test_doc_commands import BLOCKS

    assert sorted(b[0] for b in BLOCKS + PAGE_BLOCKS) == sorted(b[0] for b in ALL_BLOCKS)

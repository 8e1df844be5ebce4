"""scripts/docs_whatif.py: the thresholds guide's worked example is what `sluice whatif` prints for the guide's
change, and its picture the report's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from sluice.whatif.engine import what_if
from tests.sluice.whatif.test_engine import _changed, _config, sample  # noqa: F401 - the module-scoped fixture

_SPEC = importlib.util.spec_from_file_location("docs_whatif", Path(__file__).resolve().parents[2] / "scripts" / "docs_whatif.py")
docs_whatif = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(docs_whatif)


def test_the_guide_gets_the_printed_table_between_its_markers_and_the_report_picture(sample, tmp_path, monkeypatch):  # noqa: F811 - the imported fixture
    from sluice.config import CONFIG_ENV_VAR

    raw, _, _ = sample
    (tmp_path / "sluice.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv(CONFIG_ENV_VAR, str(tmp_path / "sluice.yaml"))
    guide = tmp_path / "guide.md"
    guide.write_text(f"# before\n\n{docs_whatif.WHATIF_BEGIN}\n```text\nstale\n```\n{docs_whatif.WHATIF_END}\n\nafter\n")
    assert docs_whatif.main(["--guide", str(guide), "--out", str(tmp_path / "pictures")]) == 0
    other = _changed(raw, min_chars=400, c4__min_num_sentences=10, gopher_quality__min_doc_words=300)
    expected = what_if(_config(raw), _config(other), str(tmp_path / "scratch")).table(1).rstrip("\n")
    assert "kept->dropped" in expected
    assert guide.read_text() == f"# before\n\n{docs_whatif.WHATIF_BEGIN}\n```text\n{expected}\n```\n{docs_whatif.WHATIF_END}\n\nafter\n"
    assert (tmp_path / "pictures" / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / ".whatif-example.yaml").exists()  # the other config is not left behind

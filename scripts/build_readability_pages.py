"""Build `benchmarks/data/readability-pages.tar.xz`, the real-page evaluation set of benchmarks/real_pages.py.

    python scripts/build_readability_pages.py GIT_DIR_OF_MOZILLA_READABILITY

The source is mozilla/readability's `test/test-pages/<name>/` (Apache-2.0): `source.html` (a real page as
fetched), `expected.html` (its article as Readability extracts it, reviewed by its maintainers) and
`expected-metadata.json` (`readerable: false` marks pages that are not articles). Kept: the real pages.
Left out: Readability's synthetic unit fixtures, i.e. pages whose expected article is lorem ipsum or whose
source is under 8 KB. The archive is reproducible (sorted names, fixed owner and time), so rebuilding it from
the same commit gives the same bytes; the commit goes into `benchmarks/data/readability-NOTICE`.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "data" / "readability-pages.tar.xz"
FILES = ("source.html", "expected.html", "expected-metadata.json")
MIN_SOURCE_BYTES = 8 * 1024


def git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={repo}", *args], check=True, capture_output=True).stdout


def is_real(files: dict[str, bytes]) -> bool:
    """Readability's synthetic fixtures have a lorem-ipsum article or a source of a few hundred bytes."""
    return b"lorem ipsum" not in files["expected.html"].lower() and len(files["source.html"]) >= MIN_SOURCE_BYTES


def main() -> None:
    repo = sys.argv[1]
    commit = git(repo, "rev-parse", "HEAD").decode().strip()
    names = git(repo, "ls-tree", "--name-only", "HEAD", "test/test-pages/").decode().split()
    kept = 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(OUT, "w:xz", preset=9) as archive:
        for path in sorted(names):
            files = {name: git(repo, "show", f"HEAD:{path}/{name}") for name in FILES}
            if not is_real(files):
                continue
            kept += 1
            for name in FILES:
                info = tarfile.TarInfo(f"{Path(path).name}/{name}")
                info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
                archive.addfile(info, io.BytesIO(files[name]))
    license_text = git(repo, "show", "HEAD:LICENSE.md")
    (OUT.parent / "readability-LICENSE").write_bytes(license_text)
    (OUT.parent / "readability-NOTICE").write_text(
        "readability-pages.tar.xz: the real pages of Mozilla Readability's test set (test/test-pages), "
        f"{kept} of {len(names)} (synthetic fixtures left out),\nfrom https://github.com/mozilla/readability "
        f"at commit {commit}.\nCopyright Mozilla and Readability contributors; Apache License 2.0 (readability-LICENSE).\n"
        "The pages themselves are the publishers' works, included in Readability's test suite as test fixtures.\n"
    )
    print(f"{OUT}: {kept} pages, {OUT.stat().st_size} bytes (commit {commit})")


if __name__ == "__main__":
    main()

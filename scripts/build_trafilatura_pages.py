"""Build `benchmarks/data/trafilatura-pages.tar.xz`, the held-out real-page set of benchmarks/real_pages.py.

    python scripts/build_trafilatura_pages.py GIT_DIR_OF_ADBAR_TRAFILATURA

The source is trafilatura's own evaluation (Apache-2.0): `tests/evaldata.json`, per page URL its HTML file
(under `tests/eval/` or `tests/cache/`) and annotated snippets the main text must contain (`with`) and must not
contain (`without`), and the pages themselves. This set is held out: no sluice setting was chosen on it, and
none may be (docs/benchmarks/method.md). It is a fixed sample, chosen by the URL alone, never by a score: the
pages whose SHA-256 of the URL starts with a hex digit below `SAMPLE_DIGITS` (a quarter of them, to keep the
archive near 5 MB). Pages already in the tuned set (`readability-pages.tar.xz`: same bytes, or the same URL as
a Readability page's canonical / og:url link) are left out. The archive is reproducible (sorted names, fixed
owner and time); the commit goes into `benchmarks/data/trafilatura-NOTICE`.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "data" / "trafilatura-pages.tar.xz"
TUNED = ROOT / "benchmarks" / "data" / "readability-pages.tar.xz"
SAMPLE_DIGITS = "0123"
_LINK = re.compile(rb"""<(?:link|meta)[^>]{0,300}?(?:rel=["']canonical["']|property=["']og:url["'])[^>]{0,300}>""", re.IGNORECASE)
_HREF = re.compile(rb"""(?:href|content)=["']([^"']{1,500})["']""", re.IGNORECASE)


def git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={repo}", *args], check=True, capture_output=True).stdout


def url_key(url: str) -> str:
    """A URL without scheme, `www.` and trailing slash, to compare page addresses."""
    return re.sub(r"^https?://(www\.)?", "", url.strip().lower()).rstrip("/")


def tuned_pages() -> tuple[set[str], set[str]]:
    """(SHA-256 of each source page, URL keys of their canonical / og:url links) of the tuned set."""
    hashes, urls = set(), set()
    with tarfile.open(TUNED, "r:xz") as archive:
        for member in archive.getmembers():
            if member.name.endswith("/source.html"):
                content = archive.extractfile(member).read()  # type: ignore[union-attr]
                hashes.add(hashlib.sha256(content).hexdigest())
                for link in _LINK.findall(content):
                    urls.update(url_key(m.decode("utf-8", "replace")) for m in _HREF.findall(link))
    return hashes, urls


def page_file(repo: str, name: str) -> bytes | None:
    for folder in ("tests/cache", "tests/eval"):
        try:
            return git(repo, "show", f"HEAD:{folder}/{name}")
        except subprocess.CalledProcessError:
            continue
    return None


def main() -> None:
    repo = sys.argv[1]
    commit = git(repo, "rev-parse", "HEAD").decode().strip()
    evaldata = json.loads(git(repo, "show", "HEAD:tests/evaldata.json"))
    tuned_hashes, tuned_urls = tuned_pages()
    chosen, files, overlap = {}, {}, []
    for url in sorted(evaldata):
        if hashlib.sha256(url.encode()).hexdigest()[0] not in SAMPLE_DIGITS:
            continue
        content = page_file(repo, evaldata[url]["file"])
        if content is None:
            continue
        if hashlib.sha256(content).hexdigest() in tuned_hashes or url_key(url) in tuned_urls:
            overlap.append(url)
            continue
        chosen[url] = evaldata[url]
        files[evaldata[url]["file"]] = content
    OUT.parent.mkdir(parents=True, exist_ok=True)
    entries = {"annotations.json": json.dumps(chosen, ensure_ascii=False, indent=1, sort_keys=True).encode()}
    entries |= {f"pages/{name}": content for name, content in files.items()}
    with tarfile.open(OUT, "w:xz", preset=9) as archive:
        for name in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(entries[name]), 0, 0o644
            archive.addfile(info, io.BytesIO(entries[name]))
    (OUT.parent / "trafilatura-LICENSE").write_bytes(git(repo, "show", "HEAD:LICENSE"))
    (OUT.parent / "trafilatura-NOTICE").write_text(
        f"trafilatura-pages.tar.xz: {len(chosen)} of the {len(evaldata)} annotated pages of trafilatura's evaluation "
        "(tests/evaldata.json and the pages under tests/eval and tests/cache),\n"
        f"the pages whose SHA-256 of the URL starts with one of {SAMPLE_DIGITS!r}, from https://github.com/adbar/trafilatura "
        f"at commit {commit}.\nAnnotations: Adrien Barbaresi, Lukas Kozmus, Lena Klink (BBAW collection), tsolewski "
        "(Polish news), Jan Oliver Ruediger (diskursmonitor.de), as trafilatura's tests/README.rst names them.\n"
        "Copyright trafilatura's authors; Apache License 2.0 (trafilatura-LICENSE).\n"
        "The pages themselves are the publishers' works, included in trafilatura's repository as test fixtures.\n"
        f"Left out as already in the tuned set (readability-pages.tar.xz): {len(overlap)} {overlap}.\n"
        "Held out: no sluice setting was chosen on these pages (docs/benchmarks/method.md).\n"
    )
    print(f"{OUT}: {len(chosen)} pages, {OUT.stat().st_size} bytes (commit {commit}); left out as tuned: {overlap}")


if __name__ == "__main__":
    main()

"""Build `benchmarks/data/trafilatura-pages.tar.xz`, the held-out real-page set of benchmarks/real_pages.py, or
with `--split dev` its development set `.bench_data/trafilatura-dev-pages.tar.xz`.

    python scripts/build_trafilatura_pages.py GIT_DIR_OF_ADBAR_TRAFILATURA [--split heldout|dev]

The source is trafilatura's own evaluation (Apache-2.0): `tests/evaldata.json`, per page URL its HTML file
(under `tests/eval/` or `tests/cache/`) and annotated snippets the main text must contain (`with`) and must not
contain (`without`), and the pages themselves. This set is held out: no sluice setting was chosen on it, and
none may be (docs/benchmarks/method.md). It is a fixed sample, chosen by the URL alone, never by a score: the
pages whose SHA-256 of the URL starts with 0 to 3 (`SPLITS`) (a quarter of them, to keep the
archive near 5 MB). Pages already in the tuned set (`readability-pages.tar.xz`: same bytes, or the same URL as
a Readability page's canonical / og:url link) are left out. The archive is reproducible (sorted names, fixed
owner and time); the commit goes into `benchmarks/data/trafilatura-NOTICE`.

The development set is another quarter, disjoint from the held-out one: the pages whose URL's SHA-256 starts
with 4 to 7 (tuned-set pages left out the same way). Extraction settings may be chosen on it, never on the
held-out set. It is about as large as the held-out archive and not committed: it is built into the git-ignored
`.bench_data/` (with its NOTICE beside it) from a copy of trafilatura's repository at the held-out set's commit
(`git clone https://github.com/adbar/trafilatura && git -C trafilatura checkout e90b0ef`, then this script
with `trafilatura/.git --split dev`).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUNED = ROOT / "benchmarks" / "data" / "readability-pages.tar.xz"
SPLITS = {  # name: (the URL SHA-256's first hex digits, archive, NOTICE beside it, what the set is for)
    "heldout": ("0123", ROOT / "benchmarks" / "data" / "trafilatura-pages.tar.xz",
                "Held out: no sluice setting was chosen on these pages (docs/benchmarks/method.md)."),
    "dev": ("4567", ROOT / ".bench_data" / "trafilatura-dev-pages.tar.xz",
            "Development set: sluice's extraction settings may be chosen on these pages (disjoint from the held-out set)."),
}
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


def build(repo: str, split: str, out: Path | None = None) -> Path:
    """Write the archive of `split` (`SPLITS`) from the trafilatura git directory `repo`; return its path."""
    digits, default_out, purpose = SPLITS[split]
    out = out or default_out
    commit = git(repo, "rev-parse", "HEAD").decode().strip()
    evaldata = json.loads(git(repo, "show", "HEAD:tests/evaldata.json"))
    tuned_hashes, tuned_urls = tuned_pages()
    chosen, files, overlap = {}, {}, []
    for url in sorted(evaldata):
        if hashlib.sha256(url.encode()).hexdigest()[0] not in digits:
            continue
        content = page_file(repo, evaldata[url]["file"])
        if content is None:
            continue
        if hashlib.sha256(content).hexdigest() in tuned_hashes or url_key(url) in tuned_urls:
            overlap.append(url)
            continue
        chosen[url] = evaldata[url]
        files[evaldata[url]["file"]] = content
    out.parent.mkdir(parents=True, exist_ok=True)
    entries = {"annotations.json": json.dumps(chosen, ensure_ascii=False, indent=1, sort_keys=True).encode()}
    entries |= {f"pages/{name}": content for name, content in files.items()}
    with tarfile.open(out, "w:xz", preset=9) as archive:
        for name in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(entries[name]), 0, 0o644
            archive.addfile(info, io.BytesIO(entries[name]))
    (out.parent / "trafilatura-LICENSE").write_bytes(git(repo, "show", "HEAD:LICENSE"))
    (out.parent / out.name.replace("-pages.tar.xz", "-NOTICE")).write_text(
        f"{out.name}: {len(chosen)} of the {len(evaldata)} annotated pages of trafilatura's evaluation "
        "(tests/evaldata.json and the pages under tests/eval and tests/cache),\n"
        f"the pages whose SHA-256 of the URL starts with one of {digits!r}, from https://github.com/adbar/trafilatura "
        f"at commit {commit}.\nAnnotations: Adrien Barbaresi, Lukas Kozmus, Lena Klink (BBAW collection), tsolewski "
        "(Polish news), Jan Oliver Ruediger (diskursmonitor.de), as trafilatura's tests/README.rst names them.\n"
        "Copyright trafilatura's authors; Apache License 2.0 (trafilatura-LICENSE).\n"
        "The pages themselves are the publishers' works, included in trafilatura's repository as test fixtures.\n"
        f"Left out as already in the tuned set (readability-pages.tar.xz): {len(overlap)} {overlap}.\n"
        f"{purpose}\n"
    )
    print(f"{out}: {len(chosen)} pages, {out.stat().st_size} bytes (commit {commit}); left out as tuned: {overlap}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", help="git directory of a copy of github.com/adbar/trafilatura")
    parser.add_argument("--split", choices=sorted(SPLITS), default="heldout")
    args = parser.parse_args()
    build(args.repo, args.split)


if __name__ == "__main__":
    main()

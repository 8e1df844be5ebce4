"""fastText's `predict` for a supervised hierarchical-softmax model, from cached per-word input sums.

fastText predicts a line by averaging the input-matrix rows of all its words' ids (a word's own row when it
is in the vocabulary, plus one row per hashed character n-gram of `<word>`, minn..maxn characters long) and of
the end-of-line token `</s>`, then taking the most probable leaf of the label tree. A word's rows never change,
so their sum and count are computed once per word, for a document's new words together in numpy, and a
document costs one dict lookup per word and one 16-wide sum. Labels and scores are fastText's up to rounding:
fastText adds float32 rows one by one, this adds float64 sums per word (tests compare both on real pages and
generated text; scores differ by about 1e-6). A word's sum does not depend on which words were new with it,
so results do not depend on what the cache held.

Model file (fastText's `.bin` / `.ftz`, little-endian; the parts read here):
  magic i32 (793712314), version i32 (12); args: 12 x i32 (dim ws epoch minCount neg wordNgrams loss model
  bucket minn maxn lrUpdateRate), t f64
  dictionary: size i32, nwords i32, nlabels i32, ntokens i64, pruneidx_size i64; size x (word: bytes up to a
  NUL, count i64, type i8: 0 word, 1 label); pruneidx_size x (bucket i32, n-gram row i32)
  quant_input u8; input matrix: dense (m i64, n i64, f32[m*n]) or quantized (qnorm u8, m i64, n i64,
  codesize i32, codes u8[codesize], quantizer (dim i32, nsubq i32, dsub i32, lastdsub i32, f32[dim*256]);
  with qnorm, norm codes u8[m] and a quantizer of dim 1 for the norms)
  qout u8; output matrix: dense, as above
`CachedPredictor.load` returns None for any other kind of model (softmax, word n-grams, quantized output);
sluice.clean.models.langid then calls fastText's predict.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

_MAGIC, _VERSION = 793712314, 12
_LOSS_HS, _MODEL_SUPERVISED = 1, 3
_KSUB = 256  # centroids per sub-quantizer
_EOS = b"</s>"
_FNV_OFFSET, _FNV_PRIME = np.uint32(2166136261), np.uint32(16777619)
# fastText hashes each byte as a signed char widened to 32 bits.
_SIGNED_BYTE = np.array([b - 256 if b >= 128 else b for b in range(256)], dtype=np.int64).astype(np.uint32)
# Words whose sums are kept: about 18 MB of sums plus the words; the cache starts afresh when full. With the
# row of each hash bucket (8 MB for lid.176's 2M buckets) and its 3 MB of decoded rows, ~35 MB per process.
_MAX_WORDS = 1 << 17


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: type, count: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.at)
        self.at += out.nbytes
        return out

    def word(self) -> bytes:
        end = self.data.index(b"\0", self.at)
        word, self.at = self.data[self.at : end], end + 1
        return word

    def dense(self) -> np.ndarray:
        rows, cols = self.take("qq")
        return self.array(np.float32, rows * cols).reshape(rows, cols)

    def quantized(self) -> np.ndarray:
        """The rows a product-quantized matrix decodes to (what fastText adds for each id)."""
        (qnorm,) = self.take("?")
        rows, cols = self.take("qq")
        (codesize,) = self.take("i")
        codes = self.array(np.uint8, codesize)
        dim, nsubq, dsub, lastdsub = self.take("iiii")
        centroids = self.array(np.float32, dim * _KSUB)
        codes = codes.reshape(rows, nsubq)
        out = np.zeros((rows, cols), dtype=np.float32)
        for sub in range(nsubq):
            width = lastdsub if sub == nsubq - 1 else dsub
            start = sub * _KSUB * dsub
            table = centroids[start : start + _KSUB * width].reshape(_KSUB, width)
            out[:, sub * dsub : sub * dsub + width] = table[codes[:, sub]]
        if qnorm:
            norm_codes = self.array(np.uint8, rows)
            self.take("iiii")  # the norms' quantizer: one dimension, one sub-quantizer
            norms = self.array(np.float32, _KSUB)
            out *= norms[norm_codes][:, None]
        return out


class _Slots(dict):
    """word -> its row in CachedPredictor.sums; a word not seen yet gets the next row and waits in `new`."""

    def __init__(self) -> None:
        super().__init__()
        self.new: list[str] = []

    def __missing__(self, word: str) -> int:
        slot = self[word] = len(self)
        self.new.append(word)
        return slot


class CachedPredictor:
    """predict(words) -> (label without its prefix, probability) as fastText's predict on the words joined by
    spaces. The caller keeps to words without whitespace, NUL or `</s>` (fastText splits at NUL and stops a
    line at `</s>`)."""

    def __init__(
        self,
        args: dict[str, int],
        vocabulary: list[tuple[bytes, int, int]],
        row_of_bucket: np.ndarray,
        rows: np.ndarray,
        output: np.ndarray,
        label_prefix: str,
    ) -> None:
        """`vocabulary`: the dictionary's (word, count, type) entries; `row_of_bucket`: the input row of each
        n-gram hash bucket, -1 where pruning dropped it."""
        self.minn, self.maxn, self.dim = args["minn"], args["maxn"], args["dim"]
        self.bucket = np.uint32(args["bucket"])
        self.word_ids = {word: i for i, (word, _, kind) in enumerate(vocabulary) if kind == 0}
        self.labels = [word.decode("utf-8").removeprefix(label_prefix) for word, _, kind in vocabulary if kind == 1]
        self.label_prefix = label_prefix.encode("utf-8")
        self.rows = rows  # float32 as in the file (lid.176.bin's are 128 MB); each word's sum is float64
        self.row_of_bucket = row_of_bucket
        self.output = output.astype(np.float64)
        self._label_paths([count for _, count, kind in vocabulary if kind == 1])
        self.eos = np.append(self.rows[self.word_ids[_EOS]].astype(np.float64), 1.0)  # end of line: its own row
        self.clear()

    @classmethod
    def load(cls, path: str | Path, label_prefix: str = "__label__") -> CachedPredictor | None:
        """The predictor for a fastText model file, or None where it is not a kind this supports."""
        r = _Reader(Path(path).read_bytes())
        if r.take("ii") != (_MAGIC, _VERSION):
            return None
        names = ["dim", "ws", "epoch", "minCount", "neg", "wordNgrams", "loss", "model", "bucket", "minn", "maxn", "lrUpdateRate"]
        args = dict(zip(names, r.take("12i"), strict=True))
        r.take("d")
        if (args["loss"], args["model"], args["wordNgrams"]) != (_LOSS_HS, _MODEL_SUPERVISED, 1) or args["maxn"] < 1:
            return None
        size, nwords, _ = r.take("iii")
        _, pruned = r.take("qq")
        vocabulary = []
        for _ in range(size):
            word = r.word()
            count, kind = r.take("qb")
            vocabulary.append((word, count, kind))
        if pruned < 0:  # not pruned: bucket b is row nwords + b
            row_of_bucket = np.arange(nwords, nwords + args["bucket"], dtype=np.int32)
        else:
            pairs = r.array(np.int32, 2 * pruned).reshape(-1, 2)
            row_of_bucket = np.full(args["bucket"], -1, dtype=np.int32)
            row_of_bucket[pairs[:, 0]] = nwords + pairs[:, 1]
        (quantized,) = r.take("?")
        rows = r.quantized() if quantized else r.dense()
        (qout,) = r.take("?")
        if quantized and qout:
            return None
        return cls(args, vocabulary, row_of_bucket, rows, r.dense(), label_prefix)

    def _label_paths(self, counts: list[int]) -> None:
        """fastText's Huffman tree over the labels (sorted by count, most frequent first), as each leaf's path:
        the internal nodes' output rows and which child (right = 1) the path takes."""
        leaves = len(counts)
        nodes = 2 * leaves - 1
        count = list(counts) + [10**15] * (leaves - 1)
        parent, right = [-1] * nodes, [False] * nodes
        leaf, node = leaves - 1, leaves
        for i in range(leaves, nodes):
            pair = []
            for _ in range(2):
                if leaf >= 0 and count[leaf] < count[node]:
                    pair.append(leaf)
                    leaf -= 1
                else:
                    pair.append(node)
                    node += 1
            count[i] = count[pair[0]] + count[pair[1]]
            parent[pair[0]] = parent[pair[1]] = i
            right[pair[1]] = True
        depth = 0
        paths = []
        for x in range(leaves):
            path = []
            while parent[x] != -1:
                path.append((parent[x] - leaves, right[x]))
                x = parent[x]
            paths.append(path)
            depth = max(depth, len(path))
        self.path_rows = np.zeros((leaves, depth), dtype=np.int64)
        self.path_right = np.zeros((leaves, depth), dtype=bool)
        self.path_used = np.zeros((leaves, depth), dtype=bool)
        for x, path in enumerate(paths):
            for step, (row, is_right) in enumerate(path):
                self.path_rows[x, step], self.path_right[x, step], self.path_used[x, step] = row, is_right, True

    def clear(self) -> None:
        """Forget every word's sums."""
        self.slots = _Slots()  # word -> its row in sums
        self.sums = np.zeros((1024, self.dim + 1))  # per word: its rows' sum, then how many rows

    def predict(self, words: list[str]) -> tuple[str, float]:
        if len(self.slots) + len(words) > _MAX_WORDS:
            self.clear()
        slots = np.fromiter(map(self.slots.__getitem__, words), np.intp, len(words))
        if self.slots.new:
            new, self.slots.new = self.slots.new, []
            first, stop = len(self.slots) - len(new), len(self.slots)
            if stop > len(self.sums):
                grown = np.zeros((max(stop, 2 * len(self.sums)), self.dim + 1))
                grown[:first] = self.sums[:first]
                self.sums = grown
            try:
                self.sums[first:stop] = self._sums(new)
            except Exception:
                self.clear()  # (words not valid UTF-8: the slots handed out have no sums)
                raise
        total = self.sums[slots].sum(axis=0) + self.eos
        hidden = total[: self.dim] / total[self.dim]
        return self._best_label(hidden)

    def _best_label(self, hidden: np.ndarray) -> tuple[str, float]:
        """The leaf with the highest log-probability: per node sigmoid(row . hidden) to the right, one minus
        it to the left, each logged with fastText's +1e-5."""
        with np.errstate(over="ignore"):  # exp(large) is inf, the sigmoid 0, as in fastText
            right = 1.0 / (1.0 + np.exp(-(self.output[: len(self.labels) - 1] @ hidden)))
        steps = np.where(self.path_right, right[self.path_rows], 1.0 - right[self.path_rows])
        scores = np.where(self.path_used, np.log(steps + 1e-5), 0.0).sum(axis=1)
        best = int(np.argmax(scores))
        return self.labels[best], min(1.0, float(np.exp(scores[best])))

    def _sums(self, words: list[str]) -> np.ndarray:
        """Per word, the sum of its input rows and their number (zeros for a label-like word)."""
        out = np.zeros((len(words), self.dim + 1))
        encoded = [word.encode("utf-8") for word in words]
        index = [k for k, word in enumerate(encoded) if word in self.word_ids or not word.startswith(self.label_prefix)]
        # (a word starting with the label prefix is a label to fastText, and adds no row)
        if not index:
            return out
        kept = [encoded[k] for k in index]
        ids, owners = self._ngram_rows([b"<" + word + b">" for word in kept])
        vocabulary = [(k, self.word_ids[word]) for k, word in enumerate(kept) if word in self.word_ids]
        if vocabulary:
            owners = np.concatenate([owners, np.array([k for k, _ in vocabulary], dtype=np.int64)])
            ids = np.concatenate([ids, np.array([row for _, row in vocabulary], dtype=np.int64)])
        rows = self.rows[ids].astype(np.float64)
        target = np.asarray(index)
        for d in range(self.dim):
            out[target, d] = np.bincount(owners, weights=rows[:, d], minlength=len(index))
        out[target, self.dim] = np.bincount(owners, minlength=len(index))
        return out

    def _ngram_rows(self, words: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(input row, word index) of every character n-gram of the words (`<word>`) whose hashed bucket the
        model keeps, as fastText's computeSubwords: n-grams of minn..maxn UTF-8 characters, FNV-1a of their
        bytes modulo the bucket count. All n-grams are hashed together, one byte column at a time."""
        lengths = np.fromiter(map(len, words), np.int64, len(words))
        ends = np.cumsum(lengths)
        starts = ends - lengths
        widest = 4 * self.maxn  # bytes of the longest n-gram (UTF-8: at most 4 a character)
        data = np.frombuffer(b"".join(words) + bytes(widest), dtype=np.uint8)
        total = int(ends[-1])
        char_starts = np.flatnonzero((data[:total] & 0xC0) != 0x80)
        owner = np.searchsorted(ends, char_starts, side="right")
        last = np.append(owner[1:] != owner[:-1], True)
        char_ends = np.where(last, ends[owner], np.append(char_starts[1:], total))
        begins, sizes, owners = [], [], []
        for n in range(max(self.minn, 1), self.maxn + 1):
            first = np.arange(max(len(char_starts) - n + 1, 0))
            fits = owner[first + n - 1] == owner[first]
            if n == 1:  # fastText leaves out `<` and `>` alone
                fits &= (char_starts[first] != starts[owner[first]]) & (char_ends[first] != ends[owner[first]])
            first = first[fits]
            begins.append(char_starts[first])
            sizes.append(char_ends[first + n - 1] - char_starts[first])
            owners.append(owner[first])
        begin, size, who = np.concatenate(begins), np.concatenate(sizes), np.concatenate(owners)
        grams = _SIGNED_BYTE[data[begin[:, None] + np.arange(int(size.max()) if len(size) else 0)]]
        h = np.full(len(begin), _FNV_OFFSET, dtype=np.uint32)
        for column in range(grams.shape[1]):
            h = np.where(column < size, (h ^ grams[:, column]) * _FNV_PRIME, h)
        row = self.row_of_bucket[h % self.bucket]
        kept = row >= 0
        return row[kept].astype(np.int64), who[kept]

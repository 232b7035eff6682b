"""A same-seed run is the same run: the trained vocabulary (so the model) does not change between trainings."""

import json
import random
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from common.utils import SPECIAL_TOKENS, train_wordpiece_tokenizer  # noqa: E402


def tied_corpus() -> list[str]:
    """Many words made of many letters with equal counts: lots of tied pairs for the trainer to break."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(300)]
    lines = [" ".join(words[i : i + 6]) for i in range(0, len(words), 6)] * 2
    return lines + ["这本书写得非常好，值得一读。", "质量太差了，非常失望。", "12345 67890 2026年"]


def test_trainings_in_this_and_another_process_give_the_same_vocabulary(tmp_path):
    texts = tied_corpus()
    first = train_wordpiece_tokenizer(texts, vocab_size=300, min_frequency=2).get_vocab()
    for _ in range(3):  # an unseeded hash order rarely repeats three times
        assert train_wordpiece_tokenizer(texts, vocab_size=300, min_frequency=2).get_vocab() == first
    assert [token for token, _ in sorted(first.items(), key=lambda item: item[1])][:5] == SPECIAL_TOKENS
    assert len(first) == 300 and "##b" in first and "好" in first  # merges made; continuing pieces and chars kept
    (tmp_path / "corpus.txt").write_text("\n".join(texts), encoding="utf-8")
    code = (
        f"import json, sys; sys.path.insert(0, {str(EXAMPLES)!r}); from common.utils import train_wordpiece_tokenizer; "
        f"texts = open({str(tmp_path / 'corpus.txt')!r}, encoding='utf-8').read().split('\\n'); "
        "print(json.dumps(train_wordpiece_tokenizer(texts, vocab_size=300, min_frequency=2).get_vocab()))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(result.stdout) == first

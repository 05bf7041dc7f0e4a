"""Prompt fingerprints (``trl_adaptive/stats/fingerprints.py``): known values, stable across processes, refused
types, and the store's mismatch check that keeps statistics from being read for another prompt."""

import hashlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from trl_adaptive.stats import PromptStatistics, prompt_fingerprint
from trl_adaptive.stats.fingerprints import image_digest


def test_prompt_fingerprint_known_values():
    text = "Solve 2x + 3 = 7. Put the answer in \\boxed{}."
    assert prompt_fingerprint(text) == hashlib.sha256(json.dumps(text).encode("utf-8")).hexdigest()[:16]
    unicode_text = "Café: ∫ x dx ="  # ensure_ascii=False: hashed as UTF-8, not as \\u escapes
    assert prompt_fingerprint(unicode_text) == hashlib.sha256(f'"{unicode_text}"'.encode()).hexdigest()[:16]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]
    canonical = '[{"content":"Be brief.","role":"system"},{"content":"2 + 2?","role":"user"}]'
    assert prompt_fingerprint(messages) == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    reordered = [{"content": m["content"], "role": m["role"]} for m in messages]
    assert prompt_fingerprint(reordered) == prompt_fingerprint(messages) == prompt_fingerprint(tuple(messages))
    fp = prompt_fingerprint(text)
    assert len(fp) == 16 and all(ch in "0123456789abcdef" for ch in fp)
    # Whitespace, the plain-vs-conversational format and message contents all count.
    assert len({prompt_fingerprint(p) for p in (text, text + " ", [{"role": "user", "content": text}])}) == 3


def test_prompt_fingerprint_is_stable_across_processes():
    code = (
        "from trl_adaptive.stats import prompt_fingerprint as f; "
        "print(f('abc'), f([{'role': 'user', 'content': 'x'}]))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1")
    }
    assert outputs == {f"{prompt_fingerprint('abc')} {prompt_fingerprint([{'role': 'user', 'content': 'x'}])}\n"}


@pytest.mark.parametrize(
    "prompt", [3, None, ["not a dict"], {"role": "user", "content": "x"}, [{"content": object()}]]
)
def test_prompt_fingerprint_rejects_other_types(prompt):
    with pytest.raises(TypeError, match="prompt"):
        prompt_fingerprint(prompt)


def test_images_count_by_their_content():
    """The same question about two pictures is two prompts; the same picture, however it is held, is one."""
    red, blue = (Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255)))
    buffer = io.BytesIO()
    red.save(buffer, format="PNG")
    decoded = Image.open(io.BytesIO(buffer.getvalue()))  # a PNG round trip keeps the pixels
    question = [{"role": "user", "content": "What is in this picture?"}]
    assert prompt_fingerprint(question, images=[red]) == prompt_fingerprint(question, images=[decoded])
    assert prompt_fingerprint(question, images=[red]) != prompt_fingerprint(question, images=[blue])
    assert prompt_fingerprint(question, images=[red, blue]) != prompt_fingerprint(question, images=[blue, red])
    assert prompt_fingerprint(question, images=[]) == prompt_fingerprint(question, images=None)
    assert prompt_fingerprint(question, images=[red]) != prompt_fingerprint(question)

    # Inside the messages (TRL's image parts), as decoded images, encoded bytes or arrays.
    def inline(image):
        return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "What?"}]}]

    assert prompt_fingerprint(inline(red)) == prompt_fingerprint(inline(decoded))
    assert prompt_fingerprint(inline(red)) != prompt_fingerprint(inline(blue))
    assert prompt_fingerprint(inline(buffer.getvalue())) != prompt_fingerprint(inline(b"other bytes"))
    assert prompt_fingerprint(inline(np.zeros((2, 2)))) != prompt_fingerprint(inline(np.ones((2, 2))))
    # The kinds of holder do not collide: an array is not its bytes, a path is not its text's bytes.
    pixels = np.asarray(red)
    assert image_digest(pixels) == image_digest(pixels.copy()) != image_digest(pixels.tobytes())
    assert image_digest("a.png") != image_digest(b"a.png")
    assert image_digest({"bytes": buffer.getvalue(), "path": None}) == image_digest(buffer.getvalue())
    assert image_digest({"bytes": None, "path": "a.png"}) == image_digest("a.png")
    palettes = [Image.new("P", (4, 4), 0) for _ in range(2)]  # the same indices, meaning red or blue
    palettes[0].putpalette([255, 0, 0] * 256)
    palettes[1].putpalette([0, 0, 255] * 256)
    assert image_digest(palettes[0]) != image_digest(palettes[1])
    with pytest.raises(TypeError, match="cannot digest an image of type object"):
        image_digest(object())


def test_fingerprint_mismatches():
    stats = PromptStatistics()
    stats.update([1, 1], [1.0, 0.0])
    fps = {i: prompt_fingerprint(f"prompt {i}") for i in range(5)}
    stats.set_fingerprints([0, 1, 2], [fps[0], fps[1], fps[2]])
    assert len(stats) == 3 and 0 in stats  # rows for new ids
    assert stats.fingerprint_mismatches([0, 1, 2, 3], [fps[i] for i in range(4)]).tolist() == []
    got = stats.fingerprint_mismatches([2, 3, 1, 2], [fps[4], fps[4], fps[0], fps[4]])
    assert got.dtype == np.int64 and got.tolist() == [1, 2]  # 3 has no stored fingerprint: not a mismatch
    stats.set_fingerprints([2], [fps[4]])  # overwrites
    assert stats.fingerprint_mismatches([2], [fps[4]]).tolist() == []
    with pytest.raises(ValueError, match="non-empty strings"):
        stats.set_fingerprints([0], [""])
    with pytest.raises(ValueError, match="non-empty strings"):
        stats.fingerprint_mismatches([0], [None])
    with pytest.raises(ValueError, match="one each"):
        stats.set_fingerprints([0, 1], [fps[0]])
    with pytest.raises(ValueError, match="prompt id 7 is given two different fingerprints"):
        stats.set_fingerprints([7, 7], [fps[0], fps[1]])

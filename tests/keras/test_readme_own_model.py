"""README "Your own model": the block is the one the result file ran, its numbers are the file's."""

import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _section():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return text.split("## Your own model\n", 1)[1].split("\n## ", 1)[0]


def test_readme_numbers_come_from_the_result_file():
    with open(os.path.join(ROOT, "results", "keras", "own_model.json"), encoding="utf-8") as f:
        result = json.load(f)
    section = _section()
    block = section.split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"
    assert block == result["block"], "rerun python tools/keras/run_readme_tutorial.py"
    assert len(block.strip().splitlines()) <= 30
    prose = section.split("\n```", 2)[-1]
    assert f"test accuracy {result['test_accuracy']:.4f}" in prose
    assert f"ε {result['epsilon']:.4f}" in prose
    assert f"accuracy {result['clean_certified_accuracy']:.3f} at l2 radius 0.25" in prose
    assert re.search(rf"in {result['seconds'] / 60:.1f} minutes", prose)
    assert result["epsilon"] <= 3.0
    # Keras' progress lines carry non-private training statistics: withheld from the file.
    assert not [l for l in result["stdout"] if re.search(r"\b(loss|accuracy): ", l)]

"""A judgment read back from a ``--judgments`` file is written again byte for byte: the lines
below were written by ``ragjudge judge --judgments`` before a Judgment held its call's Outcome
(every field copied), and must survive Judgment.from_dict -> to_dict unchanged."""

from __future__ import annotations

import json

import pytest

from ragjudge.judges import Judgment

OLD_LINES = [
    "{\"qid\": \"q01\", \"docid\": \"volc-16\", \"grade\": 2, \"probs\": {\"0\": 0.09360714426928551, \"1\": 0.0075189357587721, \"2\": 0.8175950721902236, \"3\": 0.0812788477817188}, \"expected\": 1.8865456234843758, \"reasoning\": \"General fact covers query query related specific specific.\", \"error\": null, \"failure\": null, \"model\": \"gpt-4o-mini\", \"served_model\": \"gpt-4o-mini\", \"system_fingerprint\": \"fp_sim_1\", \"prompt_id\": \"relevance\", \"prompt_version\": \"1\", \"prompt_sha\": \"c128a9241f47b2e851101724fa579c67a00257eb8db11843431b6f655f6cf2d7\", \"params\": {\"temperature\": 0.0, \"seed\": 0, \"max_tokens\": 300}, \"response_format\": \"json_schema\", \"usage\": {\"calls\": 1, \"prompt_tokens\": 436, \"cached_tokens\": 0, \"completion_tokens\": 22}, \"latency\": 0.4285741429994232, \"cached\": false}",
    "{\"qid\": \"q01\", \"docid\": \"nav-27\", \"grade\": 0, \"probs\": {\"0\": 0.8207228357249016, \"1\": 0.03004464698530097, \"2\": 0.08068030364210484, \"3\": 0.06855221364769257}, \"expected\": 0.39706189521258833, \"reasoning\": \"Claim source covers aspect background addresses detail topic addresses specific.\", \"error\": null, \"failure\": null, \"model\": \"gpt-4o-mini\", \"served_model\": \"gpt-4o-mini\", \"system_fingerprint\": \"fp_sim_1\", \"prompt_id\": \"relevance\", \"prompt_version\": \"1\", \"prompt_sha\": \"c128a9241f47b2e851101724fa579c67a00257eb8db11843431b6f655f6cf2d7\", \"params\": {\"temperature\": 0.0, \"seed\": 0, \"max_tokens\": 300}, \"response_format\": \"json_schema\", \"usage\": {\"calls\": 1, \"prompt_tokens\": 438, \"cached_tokens\": 0, \"completion_tokens\": 28}, \"latency\": 0.31140660800156184, \"cached\": false}",
]


@pytest.mark.parametrize("line", OLD_LINES)
def test_an_old_judgments_line_reads_back_and_writes_the_same_bytes(line: str) -> None:
    j = Judgment.from_dict(json.loads(line))
    assert json.dumps(j.to_dict(), ensure_ascii=False) == line
    assert j == Judgment.from_dict(json.loads(line))


def test_a_failed_judgment_keeps_its_reason_and_kind() -> None:
    d = json.loads(OLD_LINES[0])
    d.update(grade=None, probs=None, expected=None, reasoning=None,
             error="unparsable reply after 2 repairs", failure="unparsable")
    line = json.dumps(d, ensure_ascii=False)
    j = Judgment.from_dict(json.loads(line))
    assert not j.ok and j.grade is None and j.error == "unparsable reply after 2 repairs"
    assert json.dumps(j.to_dict(), ensure_ascii=False) == line

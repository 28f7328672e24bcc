"""The answer parser is the first line of defence against reward hacking."""

import pytest

from verl_ext.envs.answer import parse_answer

GAME = dict(max_response_chars=10_000, max_answer_chars=32, single_line=True)


@pytest.mark.parametrize("response,text", [
    ("<answer>a1</answer>", "a1"),
    ("thinking...\n<answer> a1 </answer>\n", "a1"),
    ("<ANSWER>B a1</Answer>", "B a1"),
    ("<answer>player=1   move=Call</answer>", "player=1 move=Call"),
])
def test_accepts_one_final_answer(response, text):
    assert parse_answer(response, **GAME).text == text


@pytest.mark.parametrize("response,reason", [
    ("a1", "no_answer_tag"),
    ("<answer>a1", "no_answer_tag"),
    ("</answer>a1<answer>", "no_answer_tag"),
    ("<answer>a1</answer><answer>b1</answer>", "several_answer_tags"),
    ("<answer><answer>a1</answer></answer>", "several_answer_tags"),
    ("<answer>a1</answer> just kidding, b1", "text_after_answer"),
    ("<answer>   </answer>", "empty_answer"),
    ("<answer>" + "a" * 33 + "</answer>", "answer_too_long"),
    ("<answer>a\x001</answer>", "control_characters"),
    ("<answer>a1\nb1</answer>", "multi_line_answer"),
    ("x" * 10_001, "response_too_long"),
    (None, "not_text"),
    (b"<answer>a1</answer>", "not_text"),
])
def test_rejects_cheap_or_malformed_output(response, reason):
    parsed = parse_answer(response, **GAME)
    assert parsed.text is None and not parsed.format_ok
    assert parsed.reason == reason


def test_multi_line_answers_allowed_for_puzzles():
    parsed = parse_answer("<answer>1 2\n3 4</answer>", max_response_chars=1000, max_answer_chars=100,
                          single_line=False)
    assert parsed.text == "1 2\n3 4"

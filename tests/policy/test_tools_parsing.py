"""Tool calls in model text: well-formed calls, several per reply, and every malformed shape."""

from policy.toolcalls import format_tool_call, parse_tool_calls


def test_round_trip_of_a_call_with_code_content():
    content = 'int main() {\n  printf("hi\\n");\n}\n'
    parsed = parse_tool_calls("I will write it.\n" + format_tool_call("write_file", {"path": "a.cu", "content": content}))
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.calls] == [("write_file", {"path": "a.cu", "content": content})]


def test_several_calls_in_order_and_string_arguments_and_fences():
    text = (
        '<tool_call>{"name": "compile", "arguments": {}}</tool_call> then '
        '<tool_call>{"name": "run", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>'
        '<tool_call>```json\n{"name": "verify"}\n```</tool_call>'
    )
    parsed = parse_tool_calls(text)
    assert parsed.errors == []
    assert [c.name for c in parsed.calls] == ["compile", "run", "verify"]
    assert parsed.calls[1].arguments == {"command": "ls"}
    assert parsed.calls[2].arguments == {}


def test_malformed_calls_become_errors_that_say_what_to_do():
    parsed = parse_tool_calls(
        '<tool_call>{"name": "run", "arguments": {"command": "ls"</tool_call>'
        '<tool_call>["compile"]</tool_call>'
        '<tool_call>{"name": "run", "arguments": [1]}</tool_call>'
        '<tool_call>{"name": "write_file", "arguments": {"path": "x"'
    )
    assert parsed.calls == []
    assert len(parsed.errors) == 4
    assert "invalid JSON" in parsed.errors[0] and "<tool_call>" in parsed.errors[0]
    assert '"name"' in parsed.errors[1]
    assert "must be an object" in parsed.errors[2]
    assert "not closed" in parsed.errors[3]


def test_text_without_calls_parses_to_nothing():
    parsed = parse_tool_calls("Let me think about the memory layout first.")
    assert parsed.calls == [] and parsed.errors == []

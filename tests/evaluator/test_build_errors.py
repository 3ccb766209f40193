"""build_errors.py: a failed build's Result.error leads with the compiler's first error lines,
wherever ninja put them in its output."""

from pytest_cudaagent.builds.build_errors import ERROR_LIMIT, build_error_text

COMMAND = "/usr/bin/python3 split_nvcc.py " + " ".join(f"-isystem /opt/torch/include/dir{n}" for n in range(40))
NINJA = (f"build failed: RuntimeError: Error building extension 'example': [1/3] g++ {COMMAND} -c main.cpp -o main.o \n"
         f"[2/3] {COMMAND} -c cuda.cu -o cuda.cuda.o \nFAILED: [code=2] cuda.cuda.o \n{COMMAND} -c cuda.cu\n"
         "cuda.cu(13): error: identifier \"undeclared\" is undefined\n      v.x = undeclared > 0.f;\n            ^\n\n"
         "1 error detected in the compilation of \"cuda.cu\".\nninja: build stopped: subcommand failed.\n")


def test_the_compilers_error_comes_right_after_the_head_when_command_lines_fill_the_limit():
    assert NINJA.index("error: identifier") > ERROR_LIMIT  # the first 2,000 characters would miss it
    text = build_error_text(NINJA)
    assert text.startswith("build failed: RuntimeError: Error building extension 'example':\n...\n")
    assert text.splitlines()[2] == 'cuda.cu(13): error: identifier "undeclared" is undefined'
    assert "1 error detected" in text and len(text) <= ERROR_LIMIT


def test_gcc_and_ptxas_error_lines_are_found_too():
    for line in ("main.cpp:5:3: error: 'x' was not declared in this scope",
                 "kernel.cu:1:10: fatal error: missing.h: No such file or directory",
                 "ptxas error   : Entry function uses too much shared data"):
        message = NINJA.replace('cuda.cu(13): error: identifier "undeclared" is undefined', line)
        assert build_error_text(message).splitlines()[2] == line


def test_a_short_message_or_one_without_an_error_line_is_kept_from_its_start():
    assert build_error_text("build failed: ImportError: no module named x\n") == "build failed: ImportError: no module named x"
    no_error_line = "build failed: " + "x" * 5000
    assert build_error_text(no_error_line) == no_error_line[:ERROR_LIMIT]

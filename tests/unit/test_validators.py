"""The validators of each input kind (composer.config.options, composer.core.files) and the one redaction."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from composer.core.errors import Invalid
from composer.core.files import load_structured, path_problem, read_text
from composer.core.redaction import redact, redact_url, strip_url
from composer.config.values import (
    ascii_number,
    check_gpus,
    check_label_key,
    check_name,
    check_reference,
    source_date_epoch,
)
from composer.config.requirements import check_requirement


@pytest.mark.parametrize("value", ["3", "1024", "auto", "all", "none"])
def test_gpus_accepted(value):
    assert check_gpus(value) is None


@pytest.mark.parametrize("value", ["0", "\u0663", "\u00b2", "1025", "-1", "9" * 30, "1.5", " 2x"])
def test_gpus_refused(value):
    assert "is not a GPU request" in check_gpus(value)


def test_numbers_are_ascii_digits_in_range():
    assert ascii_number("42", "n", 0, 100) == 42
    for bad in ("\u0664\u0662", "+4", "4e1", "", "101"):
        with pytest.raises(Invalid):
            ascii_number(bad, "n", 0, 100)


def test_source_date_epoch():
    from composer.core.errors import UsageError

    assert source_date_epoch("0") == 0
    for bad in ("\u0661", "-1", "9" * 18):
        with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
            source_date_epoch(bad)


@pytest.mark.parametrize("ref", ["triton:\u00e9t\u00e9", "tr\u00eften:1", "x:\u0661", "x/y:a\nb"])
def test_references_are_ascii(ref):
    assert check_reference(ref)


def test_names_and_label_keys_refuse_newlines():
    assert check_name("a\nb") and check_name("python\n")
    assert check_label_key("a\nb") and check_label_key("k" * 300)
    assert check_label_key("org.example.team") is None


@pytest.mark.parametrize("line", ["six", "numpy>=1.26,<2", "pkg[extra]==1.0", "x @ https://h/x-1.0-py3-none-any.whl",
                                  "https://h/pkg-1.0-py3-none-any.whl", 'six; python_version >= "3.8"'])
def test_requirements_accepted(line):
    assert check_requirement(line) is None


@pytest.mark.parametrize("line", ["!!!", "numpy>>>=2", "https://h/pkg.tar.gz", "-r x.txt", "a\x00b"])
def test_requirements_refused(line):
    assert check_requirement(line)


def test_read_text_takes_regular_files_only(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path, says in ((tmp_path / "fifo", "not a regular file"), ("/dev/zero", "not a regular file"),
                       ("/proc/self/environ", "not a regular file"), (tmp_path / "nope", "no such")):
        with pytest.raises(Invalid, match=says):
            read_text(path, "file")
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(Invalid, match="larger than 100 bytes"):
        read_text(tmp_path / "big", "file", limit=100)
    (tmp_path / "latin").write_bytes(b"\xff")
    with pytest.raises(Invalid, match="not UTF-8"):
        read_text(tmp_path / "latin", "file")


def test_read_text_says_what_a_path_that_is_no_regular_file_is(tmp_path):
    """A folder, a FIFO, a device or a socket: one line saying what it is, never an OSError."""
    import socket

    os.mkfifo(tmp_path / "fifo")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tmp_path / "sock"))
    for path, kind in ((tmp_path, "a folder"), (tmp_path / "fifo", "a FIFO"), (Path("/dev/zero"), "a character device"),
                       (tmp_path / "sock", "a socket")):
        with pytest.raises(Invalid) as caught:
            read_text(path, "set file")
        assert str(caught.value) == f"the set file {path} is {kind}, not a regular file"


def test_path_problems(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert path_problem(tmp_path / "loop", "file") == "symbolic links loop"
    assert path_problem(tmp_path / ("n" * 300), "file") == "the name is longer than the system allows"
    assert path_problem(tmp_path, "file") == "is a folder, not a regular file"
    assert path_problem(Path("/dev/zero"), "file") == "is a character device, not a regular file"
    assert path_problem(tmp_path, "folder") is None


def test_structured_files_have_limits():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(6))
    start = time.monotonic()
    with pytest.raises(Invalid, match="aliases expand"):
        load_structured(bomb, "bomb.yaml", as_json=False)
    # Expanded, the bomb is 10 million values (minutes and GBs); refused, it is milliseconds. The bound
    # is one only that regression crosses, never a loaded 2-core machine.
    assert time.monotonic() - start < 30
    with pytest.raises(Invalid, match="nested deeper"):
        load_structured("[" * 50_000 + "]" * 50_000, "deep.json", as_json=True)
    with pytest.raises(Invalid, match="is not a string"):
        load_structured("{1: a, b: c}", "keys.yaml", as_json=False)
    assert load_structured('{"a": [1, 2]}', "ok.json", as_json=True) == {"a": [1, 2]}


@pytest.mark.parametrize("url, shown", [
    ("https://u:TOKEN@bad host/s", "https://***@bad host/s"),
    ("https://u:to TOKEN@h/s", "https://***@h/s"),
    ("https://u:p@TOKEN@h:x/s", "https://***@h:x/s"),
    ("https://h/s?token=TOKEN", "https://h/s?***"),
    ("https://TOKEN@h/s#frag", "https://***@h/s#frag"),
    ("https://h/s", "https://h/s"),
])
def test_malformed_urls_lose_userinfo_and_query(url, shown):
    assert redact_url(url) == shown
    if " " not in url:  # in free text a URL ends at a space; a whole value is redacted as one URL
        assert "TOKEN" not in redact(f"see {url} and more")


@pytest.mark.parametrize("text, shown", [
    ("REF user:TOKEN@localhost:5999/x:1: not valid", "REF ***@localhost:5999/x:1: not valid"),
    ("--image full=u:TOKEN@h/x:1, full=b:1", "--image ***@h/x:1, full=b:1"),
    ("given twice (u:TOKEN@h/x:1 and b:1)", "given twice (***@h/x:1 and b:1)"),
    ("u:p@TOKEN@h/x@sha256:" + "a" * 64, "***@h/x@sha256:" + "a" * 64),
    ('{"error": "IMAGE u:TOKEN@h/x"}', '{"error": "IMAGE ***@h/x"}'),
])
def test_a_reference_without_a_scheme_loses_its_user_and_password(text, shown):
    assert redact(text) == shown


@pytest.mark.parametrize("text", [
    "nvcr.io/nvidia/tritonserver:24.09-py3@sha256:" + "a" * 64,  # a digest is no userinfo
    "x:1@sha256:abc",  # nor a malformed one
    "[HOST[:PORT]/]PATH[:TAG][@sha256:HEX]",
    '"purl": "pkg:deb/ubuntu/libc6@2.35-0ubuntu3.8?arch=amd64"',  # a package URL in an SBOM
    "maintainer: cudatools@nvidia.com",  # an e-mail address
    "@property and @@triton-composer-facts@@",
])
def test_references_digests_package_urls_and_addresses_stay_as_they_are(text):
    assert redact(text) == text


def test_recorded_urls_carry_no_credentials():
    assert strip_url("https://u:TOKEN@h/x.whl?sig=TOKEN") == "https://h/x.whl"


def test_redaction_is_linear():
    """A pattern that backtracks is quadratic on these (hours); linear, they take milliseconds. The
    bound is one only that regression crosses, never a loaded machine."""
    start = time.monotonic()
    redact("a" * 100_000 + "://" + "b" * 100_000)
    redact("x://" * 50_000)
    redact("a" * 200_000, ["secret"])
    assert time.monotonic() - start < 30


def test_requirement_forms_are_recorded_without_credentials():
    from composer.resolve.packages import secrets_of
    from composer.config.requirements import installable_requirement, public_requirement
    from composer.config.types import Packages

    lines = ("six @ https://u:TOKEN@h/six-1.16.0-py2.py3-none-any.whl", "https://TOKEN@h/pkg-1.0-py3-none-any.whl?k=TOKEN")
    assert [public_requirement(line) for line in lines] == [
        "six @ https://h/six-1.16.0-py2.py3-none-any.whl", "https://h/pkg-1.0-py3-none-any.whl"]
    assert [installable_requirement(line) for line in lines] == ["six", "pkg==1.0"]
    assert "TOKEN" in secrets_of(Packages(specs=lines))


def test_a_100_kb_argument_is_refused_in_well_under_a_second():
    """The check itself, without the process start: no pattern backtracks on a long value."""
    from composer.core.errors import UsageError
    from composer.config.options import given_on_command_line

    big = "a" * 100_000
    for values in ({"pip": [big]}, {"pip": [big + "://"]}, {"label": [f"k={big}"]}, {"label": [f"{big}=v"]},
                   {"pip_index_url": "https://x" + big}, {"pip_extra_index_url": [big + "://x"]},
                   {"tag": big}, {"backend": [big]}):
        start = time.monotonic()
        with pytest.raises(UsageError):
            given_on_command_line("build", values)
        assert time.monotonic() - start < 30, values.keys()  # backtracking: hours; linear: milliseconds


# -- a model's config.pbtxt (composer.config.pbtxt) -------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIGS = sorted([*(ROOT / "composer" / "verify" / "samples").glob("**/config.pbtxt"),
                          *(ROOT / "tests").glob("**/config.pbtxt")])


def test_every_config_pbtxt_in_the_repository_is_accepted():
    from composer.config.pbtxt import config_problem

    assert len(SHIPPED_CONFIGS) >= 10
    for path in SHIPPED_CONFIGS:
        assert config_problem(path.parent) is None, path


@pytest.mark.parametrize("text", [
    "",
    'name: "m"\n',
    'backend: "python"\nparameters: { key: "EXECUTION_ENV_PATH" }\n',
    'parameters: { key: "EXECUTION_ENV_PATH", value: { string_value: "/opt/envs/m" } }\n',
    'parameters { key: "k" value { string_value: "a\\"b" } };\n',
    "dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }\n",
    "optimization < cuda < graphs: true > >\n",
    "version_policy: { specific: { versions: [1, 3] } }\nmodel_warmup [ ]\n",
    'output [ { name: "Y" dims: [ -1, 3 ] label_filename: \'labels.txt\' } ]  # a comment\n',
    "x: 1.5e-3 y: -inf z: 0x1F w: .5 v: 'a' \"b\"\n",
])
def test_protobuf_text_format_is_accepted(text):
    from composer.config.pbtxt import syntax_problem

    assert syntax_problem(text) is None


@pytest.mark.parametrize("text, line, says", [
    ("{{{ not a config", 1, "expected a field name, got '{'"),
    ('name: "m"\ninput [ { name: "X" data_type: TYPE_FP32 \n', 2, "got the end of the file"),
    ('name: "m\n', 1, "an unterminated string"),
    ('{"name": "m"}', 1, "expected a field name"),
    ("name: m\nbackend: python\n}\n", 3, "got '}'"),
    ("input [ { name: \"X\" } \n", 1, "expected ',' or ']' in a list"),
    ("name m\n", 1, "expected ':' or '{' after a field name"),
    ("a: [1 2]\n", 1, "expected ',' or ']'"),
    ("name: \x00\n", 1, "a NUL byte"),
    ("- name: m\n", 1, "unexpected character"),
    ("a { " * 100 + "}" * 100, 1, "nested deeper than"),
])
def test_what_is_not_protobuf_text_format_is_named_with_its_line(text, line, says):
    from composer.config.pbtxt import syntax_problem

    found = syntax_problem(text)
    assert found is not None and found[0] == line and says in found[1], found


def test_a_model_repository_with_a_broken_config_is_refused_naming_the_file(tmp_path):
    from composer.core.errors import UsageError
    from composer.config.options import given_on_command_line

    (tmp_path / "repo" / "good").mkdir(parents=True)
    (tmp_path / "repo" / "good" / "config.pbtxt").write_text('backend: "python"\n')
    (tmp_path / "repo" / "noconf").mkdir()  # no configuration: the backend completes one
    assert given_on_command_line("smoke-test", {"model_repository": tmp_path / "repo"})
    (tmp_path / "repo" / "junk").mkdir()
    config = tmp_path / "repo" / "junk" / "config.pbtxt"
    for data, says in ((b"{{{ not a config", f"{config}:1: not a model configuration in protobuf text format"),
                       (b"\x89PNG\r\n\x1a\n\xff\xfe", f"the model configuration {config} is not UTF-8 text")):
        config.write_bytes(data)
        for flag, param, command in (("--bake-models", "bake_models", "render"),
                                     ("--model-repository", "model_repository", "build")):
            with pytest.raises(UsageError) as caught:
                given_on_command_line(command, {param: tmp_path / "repo"})
            assert caught.value.message.startswith(f"{flag} {tmp_path / 'repo'}: {says}"), caught.value.message


@pytest.mark.parametrize("args, says", [
    (["build", "--version", "\udcff", "-b", "python"], "--version: the argument is not UTF-8 text"),
    (["build", "--version=\udcff"], "--version: the argument is not UTF-8 text"),
    (["build", "--tag", "--version", "\udcff"], "argument 4 is not UTF-8 text"),  # --version is --tag's value
    (["--json", "render", "-o", "\udcff"], "-o: the argument is not UTF-8 text"),
    (["smoke-test", "--gpus", "1", "img\udcff"], "IMAGE: the argument is not UTF-8 text"),
    (["inspect", "a:1", "b\udcff"], "REF: the argument is not UTF-8 text"),
    (["bu\udcffild"], "argument 1 is not UTF-8 text"),
])
def test_an_argument_that_is_not_utf8_is_named_by_what_it_is_given_for(args, says):
    """A byte that is not UTF-8 arrives from the command line as a lone surrogate."""
    import typer

    from composer.cli.main import _check_arguments, app
    from composer.core.errors import UsageError

    with pytest.raises(UsageError) as caught:
        _check_arguments(typer.main.get_command(app), args)
    assert caught.value.message == says


def test_an_output_files_folder_must_exist_unless_its_writer_makes_it(tmp_path):
    from composer.core.files import check_output_file

    missing = tmp_path / "no" / "such" / "out.json"
    with pytest.raises(Invalid) as caught:
        check_output_file(missing, "--sbom")
    assert str(caught.value) == f"--sbom {missing}: the folder {missing.parent} does not exist"
    assert check_output_file(missing, "--junit", makes_folders=True) == missing  # --junit makes its folders
    assert not (tmp_path / "no").exists()
    assert check_output_file(tmp_path / "out.json", "--sbom") == tmp_path / "out.json"


def test_sbom_is_refused_up_front_when_its_folder_does_not_exist(tmp_path):
    from composer.core.errors import UsageError
    from composer.config.options import given_on_command_line

    with pytest.raises(UsageError) as caught:
        given_on_command_line("build", {"sbom": tmp_path / "nope" / "sbom.json"})
    assert caught.value.message == f"--sbom {tmp_path}/nope/sbom.json: the folder {tmp_path}/nope does not exist"
    assert given_on_command_line("build", {"sbom": tmp_path / "sbom.json"})["result.sbom"] == tmp_path / "sbom.json"

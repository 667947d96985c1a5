"""The one table of ``CKPT_*`` variables and the settings object built from it: typed
values, options over the environment, one error naming the variable for a bad value,
and no other module reading a ``CKPT_*`` variable itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ckpt
from ckpt import settings
from ckpt.settings import SettingsError

PACKAGE = Path(ckpt.__file__).parent


def test_the_environment_gives_typed_values_and_unset_gives_defaults() -> None:
    s = settings.load(
        {
            "CKPT_TEMPLATE": "off",
            "CKPT_HOLD_TIMEOUT_S": "2.5",
            "CKPT_CHUNK_CACHE_MIB": "64",
            "CKPT_CACHE_DIR": "/tmp/c",
            "CKPT_PURE_PYTHON": "",  # empty: unset
        }
    )
    assert s.template is False and s.hold_timeout_s == 2.5 and s.chunk_cache_mib == 64
    assert s.cache_dir == "/tmp/c" and s.pure_python is False
    assert settings.load({}) == settings.Settings()
    for var in settings.VARIABLES:  # the table's defaults are the object's
        assert getattr(settings.Settings(), var.field) == var.default, var.name


def test_an_option_wins_over_the_environment() -> None:
    s = settings.load({"CKPT_TEMPLATE": "1", "CKPT_ROOT": "/a"}, template=False, root="/b")
    assert s.template is False and s.root == "/b"
    assert settings.load({"CKPT_TEMPLATE": "0"}, template=None).template is False
    with pytest.raises(TypeError):
        settings.load({}, no_such=1)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CKPT_TEMPLATE", "maybe"),
        ("CKPT_HOLD_TIMEOUT_S", "soon"),
        ("CKPT_HOLD_TIMEOUT_S", "0"),
        ("CKPT_HOLD_TIMEOUT_S", "-3"),
        ("CKPT_HOLD_TIMEOUT_S", "nan"),
        ("CKPT_CHUNK_CACHE_MIB", "1.5"),
        ("CKPT_CHUNK_CACHE_MIB", "0"),
        ("CKPT_SERVE_READY_FD", "x"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as err:
        settings.load({name: value})
    text = str(err.value)
    assert text.startswith(f"{name}={value!r}: ") and "\n" not in text


def test_children_get_the_settings_that_differ_and_never_the_internal_ones() -> None:
    s = settings.load(
        {"CKPT_ROOT": "/r", "CKPT_TEMPLATE_SOCKET": "/s", "CKPT_HOLD_TIMEOUT_S": "600"},
        template=False,
        chunk_cache_mib=8,
    )
    assert settings.child_env(s) == {"CKPT_TEMPLATE": "0", "CKPT_CHUNK_CACHE_MIB": "8"}
    assert settings.load(settings.child_env(s)).template is False  # it reads back


def test_the_cli_hands_its_settings_down_without_writing_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from ckpt import cli
    from ckpt.sandbox.client import lifecycle, template_client

    seen: list[tuple[bool, str | None, str | None]] = []

    def listing(root: object) -> list[object]:  # what the library sees mid-command
        child = settings.child_env().get("CKPT_TEMPLATE")
        seen.append((template_client.disabled(), child, os.environ.get("CKPT_TEMPLATE")))
        return []

    monkeypatch.delenv("CKPT_TEMPLATE", raising=False)
    monkeypatch.setattr(lifecycle, "list_sandboxes", listing)
    runner = CliRunner()
    done = runner.invoke(cli.load(), ["--root", str(tmp_path), "--no-template", "list", "--json"])
    assert done.exit_code == 0, done.output
    assert seen == [(True, "0", None)]  # a child is told; this process's environment not
    assert settings.current().template is True  # handed back when the command ended
    done = runner.invoke(cli.load(), ["--root", str(tmp_path), "list", "--json"])
    assert seen[1] == (False, None, None)


def test_the_cli_refuses_a_bad_variable_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "CKPT_HOLD_TIMEOUT_S": "soon", "CKPT_ROOT": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "ckpt", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr == "error: CKPT_HOLD_TIMEOUT_S='soon': give a number, or unset it\n"


def _sources() -> list[tuple[Path, str]]:
    return [(p, p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]


def test_every_variable_named_in_the_package_is_in_the_table() -> None:
    named = {
        name for path, text in _sources() for name in re.findall(r"\bCKPT_[A-Z][A-Z0-9_]*\b", text)
    }
    assert "CKPT_HOLD_TIMEOUT_S" in named  # the scan sees the tree
    assert named - set(settings.BY_NAME) == set()


# a read of the environment that names a CKPT_ variable, or a constant holding one
READ = re.compile(r"""(environ\.get|environ\[|getenv|environ\.pop)\(?\s*(["']CKPT_|[A-Z_]*ENV\b)""")


def test_only_the_settings_module_reads_a_variable() -> None:
    readers = [
        str(path.relative_to(PACKAGE.parent))
        for path, text in _sources()
        if path.name != "settings.py" and READ.search(text)
    ]
    assert readers == ["ckpt/migration/serve.py"]  # it removes its fd's variable only
    assert READ.search('x = os.environ.get("CKPT_ROOT")')  # the pattern sees a read
    assert READ.search("os.environ.get(PAUSE_ENV)")

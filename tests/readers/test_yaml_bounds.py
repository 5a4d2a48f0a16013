"""A data.yaml of nested aliases (a few hundred bytes that expand to billions of values) is
refused by name in bounded memory; error messages show bounded reprs (once, a 445-byte
file exhausted memory because an error message took repr() of the whole tree)."""
import pytest

from helpers.bounded import run_bounded
from readers.errors import DatasetError
from readers.yolo import MAX_YAML_VALUES, _short, yaml_names

BOMB = "\n".join(['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["names: [*i]", ""])


def test_alias_bomb_is_refused_in_bounded_memory(tmp_path):
    assert len(BOMB) < 600
    (tmp_path / "data.yaml").write_text(BOMB)
    proc = run_bounded(f"""
        from readers.yolo import yaml_names
        from readers.errors import DatasetError
        try:
            yaml_names(open({str(tmp_path / 'data.yaml')!r}).read(), {str(tmp_path / 'data.yaml')!r})
        except DatasetError as e:
            print(str(e))
    """, mem_mb=300, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "data.yaml" in proc.stdout and "alias" in proc.stdout, proc.stdout


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_small_shared_values_still_read(depth):
    """Aliases that expand to little are fine (a names list built from an anchor)."""
    text = "base: &n [cat, dog]\nnames: *n\n" + "".join(f"x{i}: [*n, *n]\n" for i in range(depth))
    assert yaml_names(text) == ["cat", "dog"]


def test_expansion_limit_counts_every_reference():
    ten = "a: &a [" + ",".join(["1"] * 10) + "]\n"
    refs = MAX_YAML_VALUES // 11 + 1
    text = ten + "b: [" + ",".join(["*a"] * refs) + "]\nnames: [x]\n"
    with pytest.raises(DatasetError, match="alias bomb"):
        yaml_names(text)
    ok = ten + "b: [" + ",".join(["*a"] * (refs // 2)) + "]\nnames: [x]\n"
    assert yaml_names(ok) == ["x"]


def test_recursive_yaml_value_is_refused():
    with pytest.raises(DatasetError, match="recursive"):
        yaml_names("a: &a [*a]\nnames: [x]\n")


def test_short_repr_is_bounded_on_a_shared_tree():
    leaf = ["x" * 1000] * 9
    tree = leaf
    for _ in range(30):  # 9**30 leaves if walked whole
        tree = [tree] * 9
    text = _short(tree)
    assert len(text) <= 60 and text.startswith("[[[")
    assert _short("a" * 5000, 80).startswith("'aaa") and len(_short("a" * 5000, 80)) <= 80
    assert _short(7) == "7"

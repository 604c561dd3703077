from calc.ops import add, mul, neg


def test_add():
    assert add(2, 3) == 5

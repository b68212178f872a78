from o_runtime.projector import assignments


def test_only_changed_known_columns_are_set_in_order_with_numbered_parameters() -> None:
    args: list[object] = ["id-1", "t"]
    sql = assignments({"limit": 5, "value": "v", "unknown": 1}, ("label", "value", "limit"), args)
    assert sql == ', "value" = $3, "limit" = $4'
    assert args == ["id-1", "t", "v", 5]


def test_no_changes_set_nothing() -> None:
    args: list[object] = []
    assert assignments({}, ("label",), args) == ""
    assert args == []

"""The one compatibility rule: our Rust core and the installed ``datafusion`` share a major."""

from __future__ import annotations


def check_datafusion_major(installed: str, built_major: int) -> None:
    """Raise ImportError unless ``installed`` (a version string) has major ``built_major``.

    Example:
        >>> check_datafusion_major("55.0.0", 55)
        >>> check_datafusion_major("54.1.0", 55)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ImportError: datafusion-distributed-py ... built against DataFusion 55, ... 54.1.0...
    """
    head = installed.split(".")[0]
    if head.isdigit() and int(head) == built_major:
        return
    raise ImportError(
        f"datafusion-distributed-py was built against DataFusion {built_major}, "
        f"but the installed datafusion package is {installed}. "
        f"Fix: pip install 'datafusion>={built_major},<{built_major + 1}', "
        f"or install a datafusion-distributed-py release built for datafusion {installed}."
    )

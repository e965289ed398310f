"""The TREC readers' compiled block tokenizer (ragjudge/io/scanner.c)."""

def scan(
    block: bytes, want: int, exact: bool, qcol: int, dcol: int, vcol: int, ints: bool,
    long_id: int, views: bool, /,
) -> tuple[bytearray, int, bytearray, int, bytearray, str, bytearray | None, int, int] | None: ...

/* The TREC readers' block tokenizer, compiled: one pass over a block of whole lines finds
 * each data line's query id, document id and value tokens, a second fills the columns.
 *
 * It is an accelerator of ragjudge/io/trec.py's numpy scan and gives the same columns (same
 * bytes, same widths, same values), or None wherever that scan would give None: a control
 * byte other than \t\n\v\f\r, a line with the wrong number of columns, a document id longer
 * than the long-id limit, a value token the fast path does not read. None sends the block to
 * the exact line parser, which names the bad file, line and field. The package works without
 * this module (it is an optional extension): the numpy scan then does the same work.
 *
 * Whitespace is a byte <= 32 (of those only \t\n\v\f\r and space are allowed, as Python's
 * bytes.split() reads them); lines end at \n; a line whose first token starts with '#' is a
 * comment. The GIL is released while the block is scanned and while the columns are filled,
 * so the reader's worker threads scan blocks side by side. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint32_t start, len;
} Tok;

typedef struct {
    Tok *q, *d, *v;
    int64_t *rows;       /* 0-based line index of each data line */
    Py_ssize_t n;        /* data lines */
    Py_ssize_t nlines;   /* all lines ("\n" bytes) */
    uint32_t qw, dw, vw; /* widest token of each column */
} Cols;

enum { OK = 0, IRREGULAR = 1, NOMEM = -1 };

static int is_space(unsigned char c) { return c == 32 || (c >= 9 && c <= 13); }

static int little_endian(void) {
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* Flags the bytes below 33 in a little-endian word: the lowest flag is exact (borrows only
 * spoil the flags above it). */
#define BELOW33(x) (((x) - 0x2121212121212121ULL) & ~(x) & 0x8080808080808080ULL)

/* The end of the token starting at pos: the first byte <= 32 (the block ends with "\n").
 * Where the compiler counts trailing zeros, the first 16 bytes are looked at without a
 * branch on where in them the token ends (most ids and scores are 1-16 bytes). */
static Py_ssize_t token_end(const unsigned char *b, Py_ssize_t pos, Py_ssize_t size, int le) {
#if defined(__GNUC__) || defined(__clang__)
    if (le && pos + 16 <= size) {
        uint64_t x, y;
        memcpy(&x, b + pos, 8);
        memcpy(&y, b + pos + 8, 8);
        uint64_t mx = BELOW33(x), my = BELOW33(y) | 0x8000000000000000ULL;
        /* my's top flag stands for "16 or more": the loop below takes it from there */
        Py_ssize_t k = mx ? (Py_ssize_t)(__builtin_ctzll(mx) >> 3)
                          : 8 + (Py_ssize_t)(__builtin_ctzll(my) >> 3);
        pos += k;
        if (k < 15)
            return pos;
    }
#else
    (void)size;
    (void)le;
#endif
    while (b[pos] > 32)
        pos++;
    return pos;
}

static void cols_free(Cols *c) {
    PyMem_RawFree(c->q);
    PyMem_RawFree(c->d);
    PyMem_RawFree(c->v);
    PyMem_RawFree(c->rows);
}

/* Pass 1: token positions of the wanted columns of every data line. */
static int tokenize(const unsigned char *b, Py_ssize_t size, int want, int exact, int qcol,
                    int dcol, int vcol, uint32_t long_id, Cols *c) {
    /* A data line has at least `want` tokens and as many separators (the last one its "\n"),
     * a byte each: that bounds the data lines without a pass to count them. */
    size_t cap = (size_t)size / (2 * (size_t)want) + 1;
    c->n = 0;
    c->qw = c->dw = c->vw = 1;
    c->q = PyMem_RawMalloc(sizeof(Tok) * cap);
    c->d = PyMem_RawMalloc(sizeof(Tok) * cap);
    c->v = PyMem_RawMalloc(sizeof(Tok) * cap);
    c->rows = PyMem_RawMalloc(sizeof(int64_t) * cap);
    if (!c->q || !c->d || !c->v || !c->rows)
        return NOMEM;
    const int le = little_endian();
    Py_ssize_t pos = 0;
    int64_t line = 0;
    while (pos < size) {
        int col = 0;
        Tok tq = {0, 0}, td = {0, 0}, tv = {0, 0};
        for (;;) {
            unsigned char ch = b[pos];
            if (ch == '\n')
                break;
            if (ch <= 32) {
                if (!is_space(ch))
                    return IRREGULAR; /* NUL and the other control bytes */
                pos++;
                continue;
            }
            if (col == 0 && ch == '#') { /* a comment: its bytes are still checked */
                for (; b[pos] != '\n'; pos++) {
                    unsigned char x = b[pos];
                    if (x < 32 && !is_space(x))
                        return IRREGULAR;
                }
                col = -1;
                break;
            }
            Py_ssize_t s = pos;
            pos = token_end(b, pos, size, le);
            Tok t = {(uint32_t)s, (uint32_t)(pos - s)};
            if (col == qcol)
                tq = t;
            if (col == dcol)
                td = t;
            if (col == vcol)
                tv = t;
            col++;
        }
        if (col > 0) {
            if (exact ? col != want : col < want)
                return IRREGULAR;
            if (td.len > long_id)
                return IRREGULAR; /* the exact path stores a long id as a key */
            Py_ssize_t i = c->n++;
            c->q[i] = tq;
            c->d[i] = td;
            c->v[i] = tv;
            c->rows[i] = line;
            if (tq.len > c->qw)
                c->qw = tq.len;
            if (td.len > c->dw)
                c->dw = td.len;
            if (tv.len > c->vw)
                c->vw = tv.len;
        }
        pos++; /* the "\n" */
        line++;
    }
    c->nlines = (Py_ssize_t)line;
    return OK;
}

/* Bytes a column buffer has past its last row: fill_fixed's word stores may run over. */
#define SLACK 8

/* A fixed-width column (numpy's S<width>): each token from its first byte, NUL-padded.
 * Rows are written in order as whole 8-byte words, the bytes past the token masked to NUL: a
 * word that runs into the next row is overwritten by that row (and the last one's by the
 * buffer's SLACK). Several times faster than a memset and a memcpy of a few bytes per token. */
static void fill_fixed(const unsigned char *b, Py_ssize_t size, const Tok *t, Py_ssize_t n,
                       uint32_t w, char *out) {
    const uint32_t words = (w + 7) / 8;
    if (!little_endian()) {
        memset(out, 0, (size_t)n * w);
        for (Py_ssize_t i = 0; i < n; i++)
            memcpy(out + (size_t)i * w, b + t[i].start, t[i].len);
        return;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char *o = out + (size_t)i * w;
        const unsigned char *s = b + t[i].start;
        uint32_t len = t[i].len;
        if ((Py_ssize_t)t[i].start + 8 * (Py_ssize_t)words > size) { /* the block's last bytes */
            memset(o, 0, w);
            memcpy(o, s, len);
            continue;
        }
        for (uint32_t j = 0; j < words; j++) {
            uint64_t x;
            memcpy(&x, s + 8 * j, 8);
            uint32_t left = len > 8 * j ? len - 8 * j : 0;
            if (left < 8)
                x &= left ? (~(uint64_t)0 >> (64 - 8 * left)) : 0;
            memcpy(o + 8 * j, &x, 8);
        }
    }
}

/* Integer values: [+-]digits, at most 18 digits (always within int64). Anything else is left
 * to the exact path, whose rules are Python's int() restricted as trec_eval reads numbers. */
static int fill_ints(const unsigned char *b, const Tok *t, Py_ssize_t n, int64_t *out) {
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *s = b + t[i].start;
        uint32_t len = t[i].len, k = 0;
        int neg = 0;
        if (s[0] == '+' || s[0] == '-') {
            neg = s[0] == '-';
            k = 1;
        }
        if (len == k || len - k > 18)
            return IRREGULAR;
        int64_t v = 0;
        for (; k < len; k++) {
            unsigned d = (unsigned)s[k] - '0';
            if (d > 9)
                return IRREGULAR;
            v = v * 10 + (int64_t)d;
        }
        out[i] = neg ? -v : v;
    }
    return OK;
}

/* Score tokens may hold only the bytes of a decimal number: within that alphabet numpy's and
 * Arrow's parsers accept the same tokens as Python's float() and round them the same way. */
static int decimal_alphabet(const unsigned char *b, const Tok *t, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *s = b + t[i].start;
        for (uint32_t k = 0; k < t[i].len; k++) {
            unsigned char x = s[k];
            if (!((x >= '0' && x <= '9') || x == '.' || x == '+' || x == '-' || x == 'e' || x == 'E'))
                return IRREGULAR;
        }
    }
    return OK;
}

/* Powers of ten a double holds exactly. */
static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A decimal score token read exactly, where that takes one IEEE operation: a significand of at
 * most 2**53 (exact in a double) scaled by 10**e with |e| <= 22 (exact too) is correctly
 * rounded by a single multiplication or division (Clinger's fast path, as strtod, Python's
 * float() and Arrow's parser use it), so the bits are theirs. Returns 0 for any other token
 * (too many digits, a large exponent, a malformed number): the caller then leaves the block's
 * scores to Arrow or numpy, which round those correctly too. Needs double arithmetic without
 * excess precision (x87's would round twice). */
static int fast_decimal(const unsigned char *s, uint32_t len, double *out) {
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    uint32_t k = 0;
    int neg = 0, any = 0, digits = 0, frac = 0;
    uint64_t m = 0;
    if (k < len && (s[k] == '+' || s[k] == '-'))
        neg = s[k++] == '-';
    for (int part = 0; part < 2; part++) { /* the integer part, then the fraction */
        for (; k < len && s[k] >= '0' && s[k] <= '9'; k++) {
            any = 1;
            if (m || s[k] != '0') { /* leading zeros are not significant */
                if (++digits > 19)
                    return 0;
                m = m * 10 + (uint64_t)(s[k] - '0');
            }
            frac += part;
        }
        if (part == 0) {
            if (k < len && s[k] == '.')
                k++;
            else
                break;
        }
    }
    if (!any)
        return 0;
    int e = 0;
    if (k < len && (s[k] == 'e' || s[k] == 'E')) {
        int eneg = 0, edigits = 0;
        k++;
        if (k < len && (s[k] == '+' || s[k] == '-'))
            eneg = s[k++] == '-';
        for (; k < len && s[k] >= '0' && s[k] <= '9'; k++) {
            if (++edigits > 4)
                return 0;
            e = e * 10 + (s[k] - '0');
        }
        if (!edigits)
            return 0;
        if (eneg)
            e = -e;
    }
    if (k != len)
        return 0;
    if (m == 0) {
        *out = neg ? -0.0 : 0.0;
        return 1;
    }
    e -= frac;
    if (m > ((uint64_t)1 << 53) || e < -22 || e > 22)
        return 0;
    double v = e < 0 ? (double)m / POW10[-e] : (double)m * POW10[e];
    *out = neg ? -v : v;
    return 1;
#else
    (void)s;
    (void)len;
    (void)out;
    return 0;
#endif
}

/* Scores read by fast_decimal into out; 0 when one of them is not such a token. */
static int fill_floats(const unsigned char *b, const Tok *t, Py_ssize_t n, double *out) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!fast_decimal(b + t[i].start, t[i].len, out + i))
            return 0;
    return 1;
}

/* Arrow string_view structs over the block itself (buffer 0): 16 bytes each, the length, then
 * either the token inline (up to 12 bytes, zero-padded) or its first 4 bytes, the buffer
 * index and the offset. Arrow's layout is little-endian, as are the platforms numpy and Arrow
 * share here; the Python side only asks for views on a little-endian machine. */
static void fill_views(const unsigned char *b, const Tok *t, Py_ssize_t n, unsigned char *out) {
    memset(out, 0, (size_t)n * 16);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char *o = out + (size_t)i * 16;
        uint32_t len = t[i].len;
        int32_t len32 = (int32_t)len, zero = 0, off = (int32_t)t[i].start;
        memcpy(o, &len32, 4);
        if (len <= 12) {
            memcpy(o + 4, b + t[i].start, len);
        } else {
            memcpy(o + 4, b + t[i].start, 4);
            memcpy(o + 8, &zero, 4);
            memcpy(o + 12, &off, 4);
        }
    }
}

static PyObject *new_bytes(Py_ssize_t n) { return PyByteArray_FromStringAndSize(NULL, n); }

PyDoc_STRVAR(scan_doc,
"scan(block, want, exact, qcol, dcol, vcol, ints, long_id, views)\n--\n\n"
"Columns of one block of whole lines: (qids, qwidth, docids, dwidth, values, layout, rows,\n"
"n, nlines), or None when the block is irregular. qids and docids are NUL-padded fixed-width\n"
"bytes. values are laid out as layout says: 'int64' (ints), 'float64' (every score read\n"
"exactly here), else 'views' (Arrow string_view structs over the block, when views is true)\n"
"or 'S<width>' (fixed-width score tokens). rows holds the int64 line index of each data\n"
"line, or is None when every line is one.");

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    int want, exact, qcol, dcol, vcol, ints, views;
    unsigned int long_id;
    if (!PyArg_ParseTuple(args, "y*ipiiipIp", &buf, &want, &exact, &qcol, &dcol, &vcol, &ints,
                          &long_id, &views))
        return NULL;
    const unsigned char *b = buf.buf;
    Py_ssize_t size = buf.len;
    Cols c = {0};
    double *floats = NULL;
    PyObject *qo = NULL, *dobj = NULL, *vo = NULL, *ro = NULL, *layout = NULL, *result = NULL;
    int rc, parsed = 0;
    if (size == 0 || b[size - 1] != '\n' || size > INT32_MAX) {
        rc = IRREGULAR; /* blocks end with "\n"; views address the block with int32 offsets */
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = tokenize(b, size, want, exact, qcol, dcol, vcol, long_id, &c);
        if (rc == OK && !ints) {
            floats = PyMem_RawMalloc(sizeof(double) * (size_t)(c.n ? c.n : 1));
            if (!floats)
                rc = NOMEM;
            else if (!(parsed = fill_floats(b, c.v, c.n, floats)))
                rc = decimal_alphabet(b, c.v, c.n); /* fast_decimal reads only such tokens */
        }
        Py_END_ALLOW_THREADS
    }
    if (rc == NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (rc == IRREGULAR) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t n = c.n;
    Py_ssize_t vsize;
    if (ints)
        layout = PyUnicode_FromString("int64"), vsize = 8 * n;
    else if (parsed)
        layout = PyUnicode_FromString("float64"), vsize = 8 * n;
    else if (views)
        layout = PyUnicode_FromString("views"), vsize = 16 * n;
    else
        layout = PyUnicode_FromFormat("S%u", c.vw), vsize = n * (Py_ssize_t)c.vw + SLACK;
    qo = new_bytes(n * (Py_ssize_t)c.qw + SLACK);
    dobj = new_bytes(n * (Py_ssize_t)c.dw + SLACK);
    vo = new_bytes(vsize);
    if (!layout || !qo || !dobj || !vo)
        goto done;
    if (n != c.nlines) {
        ro = new_bytes(8 * n);
        if (!ro)
            goto done;
    }
    char *qp = PyByteArray_AS_STRING(qo), *dp = PyByteArray_AS_STRING(dobj);
    char *vp = PyByteArray_AS_STRING(vo), *rp = ro ? PyByteArray_AS_STRING(ro) : NULL;
    rc = OK;
    Py_BEGIN_ALLOW_THREADS
    fill_fixed(b, size, c.q, n, c.qw, qp);
    fill_fixed(b, size, c.d, n, c.dw, dp);
    if (ints)
        rc = fill_ints(b, c.v, n, (int64_t *)(void *)vp);
    else if (parsed)
        memcpy(vp, floats, 8 * (size_t)n);
    else if (views)
        fill_views(b, c.v, n, (unsigned char *)vp);
    else
        fill_fixed(b, size, c.v, n, c.vw, vp);
    if (rp)
        memcpy(rp, c.rows, 8 * (size_t)n);
    Py_END_ALLOW_THREADS
    if (rc != OK) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = Py_BuildValue("(OIOIOOOnn)", qo, c.qw, dobj, c.dw, vo, layout, ro ? ro : Py_None, n,
                           c.nlines);
done:
    Py_XDECREF(qo);
    Py_XDECREF(dobj);
    Py_XDECREF(vo);
    Py_XDECREF(ro);
    Py_XDECREF(layout);
    PyMem_RawFree(floats);
    cols_free(&c);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ragjudge.io.scanner",
    "The TREC readers' compiled block tokenizer (see ragjudge.io.trec).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_scanner(void) { return PyModule_Create(&module); }

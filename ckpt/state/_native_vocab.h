/* The native engine's shared vocabulary: MessagePack's codes, the op codes of the plans
 * native.py builds, value kinds and limits.  Declared once, here; both halves of the core
 * (_native.c writes, _native_read.c reads) use these names, and the module exports each
 * code to Python (ckpt_add_vocab, called at module init) so native.py reads them from the
 * module instead of keeping copies in step by hand. */
#ifndef CKPT_NATIVE_VOCAB_H
#define CKPT_NATIVE_VOCAB_H
#include <Python.h>

/* ---- MessagePack (https://github.com/msgpack/msgpack/blob/master/spec.md) ------------- */
enum {
    MP_POSFIX_MAX = 0x7f, /* 0x00-0x7f: a positive fixint */
    MP_FIXMAP = 0x80,     /* 0x80-0x8f: a map of up to 15 pairs */
    MP_FIXARRAY = 0x90,   /* 0x90-0x9f: an array of up to 15 items */
    MP_FIXSTR = 0xa0,     /* 0xa0-0xbf: a string of up to 31 bytes */
    MP_NIL = 0xc0,
    MP_FALSE = 0xc2,
    MP_TRUE = 0xc3,
    MP_BIN8 = 0xc4,
    MP_BIN16 = 0xc5,
    MP_BIN32 = 0xc6,
    MP_EXT8 = 0xc7,
    MP_EXT16 = 0xc8,
    MP_EXT32 = 0xc9,
    MP_FLOAT32 = 0xca,
    MP_FLOAT64 = 0xcb,
    MP_UINT8 = 0xcc,
    MP_UINT16 = 0xcd,
    MP_UINT32 = 0xce,
    MP_UINT64 = 0xcf,
    MP_INT8 = 0xd0,
    MP_INT16 = 0xd1,
    MP_INT32 = 0xd2,
    MP_INT64 = 0xd3,
    MP_FIXEXT1 = 0xd4, /* 0xd4-0xd8: fixext 1, 2, 4, 8, 16 */
    MP_FIXEXT16 = 0xd8,
    MP_STR8 = 0xd9,
    MP_STR16 = 0xda,
    MP_STR32 = 0xdb,
    MP_ARRAY16 = 0xdc,
    MP_ARRAY32 = 0xdd,
    MP_MAP16 = 0xde,
    MP_MAP32 = 0xdf,
    MP_NEGFIX_MIN = 0xe0, /* 0xe0-0xff: a negative fixint */
};
#define MP_FIX_ITEMS 16 /* fixarray and fixmap hold fewer items than this */
#define MP_FIX_STR 32   /* fixstr holds fewer bytes than this */

/* The typed engine's self-describing tags ({tag: payload}, dyn.py): a reference {0: id},
 * a tuple {1: [...]}, a set {2: [...]}, a frozenset {3: [...]}, a dict {4: [[k], [v]]},
 * an int beyond 64 bits {7: "decimal"}, a compact slot's escape {8: dyn value} (wire.py). */
enum { TAG_REF = 0, TAG_TUPLE, TAG_SET, TAG_FROZENSET, TAG_DICT, TAG_BYTEARRAY, TAG_ENUM,
       TAG_BIGINT, TAG_SLOT, TAG_VALUE };

/* ---- save: a field's op (Plan entries) and an element's op inside a container --------- */
enum {
    OP_PY = 0, /* the slot function writes it */
    OP_SCALAR,
    OP_REF,
    OP_ENUM,
    OP_ANY,
    OP_LIST,
    OP_SET,
    OP_DICT,
    OP_TUPLE,
    OP_FROZENSET,
    OP_SAVE,      /* the field's save= function gives its plain value */
    OP_VALUE,     /* a stdlib value type (VK_*) */
    OP_BYTEARRAY, /* bytes; a plain field's empty one Nil */
    OP_ENUM_DYN,  /* an enum typed always escapes: {T_SLOT: {T_ENUM: [index, value]}} */
};
/* M_NONE in the mask of a container, tuple, bytearray or enum op: an Optional field,
 * None written Nil and anything else in typed's compact form (fit.compact: the items
 * checked before the container's identity, an empty one written empty, not Nil). */
enum { E_NONE = 0, E_SCALAR, E_REF, E_ENUM, E_ANY, E_TUPLE, E_LIST, E_LIST_REF, E_NEST };
/* E_LIST: a list of scalars (the side's mask) inside a list or as a dict's values;
 * E_LIST_REF: a list of references.  Identity-tracked as typed's compact form of a
 * list: met before, Nil (recorded as shared); empty, an empty array.  E_NEST: a list's
 * items or a dict's values nested deeper, as the field's nest program (SK_* nodes) says. */

/* A nest program's nodes (E_NEST): a flat array from the annotation, each container
 * node's nodes below it after it (so walking it is bounded by the plan, never by the
 * input).  SK_SCALAR: a scalar within the node's mask; SK_REF: a reference (None is
 * object 0); SK_ENUM: a compact enum's member; SK_LIST, SK_SET, SK_DICT: a mutable
 * container, identity-tracked as typed's compact form is; SK_FROZENSET: its items.
 * M_NONE in an enum or container node's mask: Optional, None written Nil. */
enum { SK_SCALAR = 0, SK_REF, SK_ENUM, SK_LIST, SK_SET, SK_FROZENSET, SK_DICT };

/* Exact scalar types as bits of a field's mask. */
enum { M_NONE = 1, M_BOOL = 2, M_INT = 4, M_FLOAT = 8, M_STR = 16, M_BYTES = 32 };
/* A tuple position (or every item of tuple[X, ...]) that holds a reference, not a scalar. */
#define M_REF 64
/* ... or a member of the enum class the plan names for it (with M_NONE: or None). */
#define M_ENUM 128
/* ... or anything, written self-describing (an Any position, every item of tuple[Any, ...]
 * and of a bare tuple). */
#define M_ANY 256

/* ---- load: a field's op (the fill plans native._load_plan builds) --------------------- */
enum {
    L_PY = 0, /* the slot decoder reads it */
    L_DEFAULT,
    L_FACTORY,
    L_RAW,
    L_NONE_ZERO,
    L_FALSY_ZERO,
    L_TUPLE,
    L_REF,
    L_ANY,
    L_ENUM,
    L_SEQ_REF,
    L_SEQ,
    L_DICT,
    L_DICT_REF,
    L_SAVE,
    L_VALUE,
    L_SEQ_TUPLE,
    L_ELEM, /* the field's element program (EK_* nodes, from its annotation) reads it */
};
/* What a sequence field's items are built into. */
enum { B_LIST = 0, B_SET, B_FROZENSET, B_TUPLE };
/* How a zero or a default factory is made (make_zero): the object itself, a call, or
 * the three factories C makes without a call. */
enum { Z_OBJECT = 0, Z_CALL, Z_LIST, Z_DICT, Z_SET };

/* An element program's nodes (L_ELEM): a value decoded as codegen.elem_decoder decodes
 * one of its kind.  EK_PASS: a scalar (or Optional scalar) as it lies; EK_REF: an object
 * id; EK_ANY: a self-describing value; EK_ENUM: a member by value; EK_OPT: Nil or the
 * node below; EK_TUPLE: exactly as many items as nodes below; EK_SEQ: a list, set,
 * frozenset or tuple (B_*) of the node below; EK_DICT: [[keys], [values]]; EK_BYTEARRAY:
 * a binary.  Programs are as deep as the annotation, at most MAX_ELEM_DEPTH. */
enum { EK_PASS = 0, EK_REF, EK_ANY, EK_ENUM, EK_OPT, EK_TUPLE, EK_SEQ, EK_DICT, EK_BYTEARRAY };

/* ---- value kinds: the stdlib types both directions handle in C (OP_VALUE, L_VALUE), as
 * their codecs in values.py write them ---------------------------------------------------- */
enum { VK_DATETIME = 1, VK_DATE, VK_TIMEDELTA, VK_UUID };

/* ---- limits ----------------------------------------------------------------------------- */
#define MAX_DEPTH 64       /* nesting the writer and the reader take in C; deeper is msgspec's */
#define MAX_TUPLE_ITEMS 8  /* tuple[A, B, ...] items a plan gives per-item masks for */
#define MAX_ELEM_DEPTH 6   /* nodes on a path of an element program (L_ELEM) */
#define MAX_ELEM_NODES 32  /* nodes in one element program */

/* The codes above as module constants (module init); 0, or -1 with an error set. */
int ckpt_add_vocab(PyObject *m);

#endif

#!/usr/bin/env python3
"""mkseeds.py - write the seed GGUF files of the fuzz corpus (small, valid,
covering every metadata value type and tensor type the reader accepts).
Run from tests/fuzz/: python3 mkseeds.py corpus"""
import struct, sys, os

def s(x):
    b = x.encode()
    return struct.pack('<Q', len(b)) + b

def kv(key, t, payload):
    return s(key) + struct.pack('<I', t) + payload

def build(kvs, tensors, align=32):
    # tensors: (name, dims, type, nbytes)
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs))
    out += b''.join(kvs)
    off, datas = 0, []
    for name, dims, ty, nbytes in tensors:
        out += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        out += struct.pack('<IQ', ty, off)
        datas.append((off, nbytes))
        off = (off + nbytes + align - 1) // align * align
    out += b'\0' * ((-len(out)) % align)
    data = bytearray(off)
    for i in range(len(data)):
        data[i] = (i * 131 + 7) & 0xff
    return out + bytes(data)

scalars = [
    kv('general.architecture', 8, s('llama')),
    kv('a.u8', 0, struct.pack('<B', 7)), kv('a.i8', 1, struct.pack('<b', -7)),
    kv('a.u16', 2, struct.pack('<H', 700)), kv('a.i16', 3, struct.pack('<h', -700)),
    kv('a.u32', 4, struct.pack('<I', 70000)), kv('a.i32', 5, struct.pack('<i', -70000)),
    kv('a.f32', 6, struct.pack('<f', 0.5)), kv('a.bool', 7, b'\1'),
    kv('a.u64', 10, struct.pack('<Q', 1 << 40)), kv('a.i64', 11, struct.pack('<q', -(1 << 40))),
    kv('a.f64', 12, struct.pack('<d', 0.25)),
    kv('a.strs', 9, struct.pack('<IQ', 8, 3) + s('x') + s('') + s('yz')),
    kv('a.ints', 9, struct.pack('<IQ', 5, 4) + struct.pack('<4i', 1, -2, 3, -4)),
]
types = [(0, 4), (1, 2), (30, 2), (8, 34), (2, 18), (3, 20)]
tensors = [('t%d' % ty, (32, 2), ty, 2 * bpb * (32 if ty in (0, 1, 30) else 1)) for ty, bpb in types]
os.makedirs(sys.argv[1], exist_ok=True)
seeds = {
    'empty-v3.gguf': build([], []),
    'metadata-only.gguf': build(scalars, []),
    'all-types.gguf': build(scalars[:1], tensors),
    'aligned-64.gguf': build([kv('general.alignment', 4, struct.pack('<I', 64))], tensors[:2], 64),
    'four-dims.gguf': build([], [('w', (32, 1, 2, 1), 0, 32 * 2 * 4)]),
}
for name, blob in seeds.items():
    open(os.path.join(sys.argv[1], name), 'wb').write(blob)

"""What the seed scripts share (seeds-dropin.py, seeds-misuse.py): the
little-endian packers and writing a dict of seeds to a corpus directory."""
import os, struct, sys

u8 = lambda v: struct.pack('<B', v)
u16 = lambda v: struct.pack('<H', v)
u32 = lambda v: struct.pack('<I', v)


def write_seeds(seeds, target):
    """Write each seed to a file of its name in argv[1], or in
    fuzz/corpus/<target>/ without an argument; say how many."""
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'corpus', target)
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)
    print(f'{len(seeds)} seeds in {out}')

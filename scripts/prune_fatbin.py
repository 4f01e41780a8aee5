# Copied from ../shared/tools/gpu-bundle/prune_fatbin.py (our own tooling, 2026-11-30)
# so that `make gpu-bundle` does not need ../shared; keep the two in step.
#
# Keeps only the cubins for one SM architecture in every CUDA fatbin container
# of a shared library (e.g. an ORT CUDA provider), zero-filling what is dropped,
# so that the file compresses far better. The file size and layout are unchanged;
# each container's header gets its new payload size. UNTESTED on a GPU: check
# with `cuobjdump --list-elf` and a real run before relying on it.
import struct, sys
src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = bytearray(open(src, 'rb').read())
pos = n = kept = dropped = 0
while True:
    i = b.find(struct.pack('<I', 0xBA55ED50), pos)
    if i < 0:
        break
    ver, hsz, fsz = struct.unpack_from('<HHQ', b, i + 4)
    if ver != 1 or hsz != 16:
        pos = i + 4
        continue
    n += 1
    p, end, parts = i + hsz, i + hsz + fsz, []
    while p < end:
        kind, _, ehsz, esz = struct.unpack_from('<HHIQ', b, p)
        arch = struct.unpack_from('<I', b, p + 28)[0]
        if arch == keep:
            parts.append(bytes(b[p:p + ehsz + esz])); kept += esz
        else:
            dropped += esz
        p += ehsz + esz
    payload = b''.join(parts)
    b[i + hsz:end] = payload + bytes(fsz - len(payload))
    struct.pack_into('<Q', b, i + 8, len(payload))
    pos = end
open(dst, 'wb').write(b)
print(f"{n} containers, kept {kept/2**20:.1f} MiB of sm_{keep}, dropped {dropped/2**20:.1f} MiB")

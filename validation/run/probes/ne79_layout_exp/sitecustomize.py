"""ne79 validation experiment (not a rule of the twin): lay out blind336/ly03's (or ly02's) host-built
tensors where an H100 PLAIN process had them, from nd79_layout_at_end.py's JSON (maps and storages at
Python's first `_lazy_init`: fixtures/run/nd79_layout_at_end_ly02_ly03_s79_h100.tar.xz), replacing
`Capture._map_host_tensors` in every process started with this folder on PYTHONPATH (sitecustomize).

NE79_LAYOUT: none | plain | plain_ctx | nostack | nostack_nogap | stack_nogap | hist_ctx | ly02 (the free
ranges among the tensors that each mode leaves, MiB from the top storage: see `frees`);
NE79_JSON: the probe's JSON (default /tmp/ne/ly03_plain.json); NE79_REF_ABOVE: top storage minus the
context's anchor B, MiB (ly03 plain: 8834.5, from the 16 MiB segment at B+72 and the 2 MiB one at B-2;
ly02 plain: 8786.5390625). "plain_ctx" keeps ly03's cuInit thread stack at the top of the upper hole and
lays out the context's own 8 MiB stack (+4 KiB guard) at the top of the lower hole, as the H100's end maps
show them.

    PYTHONPATH=$WT/python:/tmp/tv_timm:/tmp/peft0210:/tmp/acc1150:$WT/validation/run/probes/ne79_layout_exp \\
      NE79_LAYOUT=plain_ctx GPU=h100 python validation/run_answers.py -j 1 out.jsonl \\
      validation/run/blind336/ly03_*.py
"""

import os
import weakref

MODE = os.environ.get("NE79_LAYOUT")
if MODE:
    import vramscope._capture as C

    MIB = 1 << 20
    BASE = float(os.environ.get("NE79_REF_ABOVE", "8834.5"))  # ref - B in MiB

    def _map_host_tensors(self):
        import json

        if MODE == "none":
            self.host_mappings = []
            return
        src = os.environ.get("NE79_JSON", "/tmp/ne/ly03_plain.json")
        d = json.load(open(src))
        hs = sorted([r for r in d["host_storages"] if r[3]], key=lambda r: r[1])
        ref = max(r[1] for r in hs) // 4096 * 4096
        gpu = [((r[1] // 4096 * 4096 - ref) / MIB, r[4], r[2]) for r in hs]
        mine = sorted(
            (st for st in self._host_storages() if st.nbytes() in (9437184, 15375360, 9040896)),
            key=lambda st: st.data_ptr(),
        )
        assert [st.nbytes() for st in mine] == [g[2] for g in gpu], ([st.nbytes() for st in mine], len(gpu))
        device = self.device
        self.host_mappings = []
        frees = {
            "plain": [(-258.5, -245.421875), (-137.375, -122.7109375), (-14.6640625, -8.00390625)],
            "nostack": [(-258.5, -245.421875), (-137.375, -122.7109375), (-14.6640625, 0.0)],
            "nostack_nogap": [(-137.375, -122.7109375), (-14.6640625, 0.0)],
            "stack_nogap": [(-137.375, -122.7109375), (-14.6640625, -8.00390625)],
            "ly02": [],
            # the context's own thread stack (8 MiB + guard) at the top of the lower hole
            "plain_ctx": [(-258.5, -245.421875), (-137.375, -130.71484375), (-14.6640625, -8.00390625)],
            # hist-like: cuInit's stack elsewhere, the context's at the top hole
            "hist_ctx": [(-137.375, -122.7109375), (-14.6640625, -8.00390625)],
        }[MODE]
        for (rel, length, _n), st in zip(gpu, mine, strict=True):
            addr = device.host_at(round((rel + BASE) * MIB), length)
            assert addr is not None
            placed = (addr, length)

            def unmap(_ref, placed=placed, device=device):
                if self.active:
                    device.host_unmapped(*placed)

            self.host_mappings.append(weakref.ref(st, unmap))
        for a, b in frees:
            device.host_free_at(round((a + BASE) * MIB), round((b - a) * MIB))
        print("NE79 layout", MODE, BASE, len(mine), file=__import__("sys").stderr)

    C.Capture._map_host_tensors = _map_host_tensors

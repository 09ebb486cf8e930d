"""Compares two trees' run directories: checkpoint variables, ledger, metrics/config layout."""
import json, os, sys
import numpy as np
import tensorflow as tf

old, new = sys.argv[1], sys.argv[2]
ok = True
for name in sorted(d for d in os.listdir(old) if os.path.isdir(os.path.join(old, d))):
    a, b = os.path.join(old, name), os.path.join(new, name)
    if not os.path.isdir(b):
        print(f"{name}: MISSING in new"); ok = False; continue
    msgs = []
    ra = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(a, "checkpoints")))
    rb = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(b, "checkpoints")))
    va, vb = ra.get_variable_to_shape_map(), rb.get_variable_to_shape_map()
    if set(va) != set(vb):
        msgs.append(f"checkpoint keys differ: -{sorted(set(va)-set(vb))[:5]} +{sorted(set(vb)-set(va))[:5]}")
    nvar = 0
    for k in sorted(set(va) & set(vb)):
        if k.startswith("_CHECKPOINTABLE_OBJECT_GRAPH"):
            continue
        x, y = ra.get_tensor(k), rb.get_tensor(k)
        nvar += 1
        if not np.array_equal(np.asarray(x), np.asarray(y)):
            msgs.append(f"value differs: {k}")
    la = json.load(open(os.path.join(a, "ledger.json"))); lb = json.load(open(os.path.join(b, "ledger.json")))
    if la != lb:
        msgs.append("ledger differs")
    ma = json.load(open(os.path.join(a, "metrics.json"))); mb = json.load(open(os.path.join(b, "metrics.json")))
    def strip(m):
        m = dict(m); m.pop("seconds", None)
        m["segments"] = [{k: v for k, v in s.items() if k != "seconds"} for s in m["segments"]]
        return m
    if strip(ma) != strip(mb):
        msgs.append(f"metrics differ: {strip(ma)} vs {strip(mb)}")
    ca = json.load(open(os.path.join(a, "config.json"))); cb = json.load(open(os.path.join(b, "config.json")))
    for c in (ca, cb):
        c.pop("flags", None)
    if ca != cb:
        diff = {k: (ca.get(k), cb.get(k)) for k in set(ca) | set(cb) if ca.get(k) != cb.get(k)}
        msgs.append(f"config differs: {str(diff)[:300]}")
    fa = sorted(os.listdir(a)); fb = sorted(os.listdir(b))
    if fa != fb:
        msgs.append(f"files differ {fa} {fb}")
    print(f"{name}: {'IDENTICAL' if not msgs else 'DIFF'} ({nvar} checkpoint tensors, test_accuracy {ma['test_accuracy']} vs {mb['test_accuracy']}, eps {la.get('epsilon')} vs {lb.get('epsilon')})")
    for m in msgs:
        print("   ", m); ok = False
print("ALL IDENTICAL" if ok else "SOME DIFFER")

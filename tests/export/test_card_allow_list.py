"""The model card is an allow-list (issue 22 item 3): walks the card and every JSON config
inside an export, for keys outside the card's allow-list and for known private names (seeds,
paths, training statistics, statistics fitted on training data). Positive controls: a private
key injected into a run is dropped from the card, and one injected into a card is caught."""

import json
import os
import shutil
import zipfile

from tfdp import export, rundir

# Names that hold the run's secret, a local path or a statistic computed from training data
# outside the privately trained weights. None may appear as a key of any exported config.
PRIVATE_NAMES = frozenset((
    "seed", "seed_source", "run_key", "data_dir", "model_dir", "hgm_r_file", "r_file",
    "data_sha256", "train_loss", "train_accuracy", "nonprivate_training_stats",
    "pretrain_train_accuracy", "r_min_times_K", "r_max_times_K", "last_epoch"))


def _keys(obj, path=""):
    """(path, key) of every dict key in a JSON value, at any depth."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{path}.{k}", k
            yield from _keys(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _keys(v, f"{path}[{i}]")


def _configs(export_dir):
    """(name, parsed JSON) of every JSON file of the export and inside its .keras archive."""
    out = []
    for root, _, files in os.walk(export_dir):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".json"):
                with open(path, encoding="utf-8") as f:
                    out.append((path, json.load(f)))
            elif name.endswith(".keras"):
                with zipfile.ZipFile(path) as z:
                    out += [(f"{path}:{m}", json.loads(z.read(m))) for m in z.namelist()
                            if m.endswith(".json")]
    return out


def leaks(export_dir, method):
    """Every violation in an export: card keys off the allow-list, private names anywhere."""
    configs = _configs(export_dir)
    cards = [c for p, c in configs if os.path.basename(p) == export.CARD_FILE]
    assert len(cards) == 2, [p for p, _ in configs]  # beside saved_model.pb and as an asset
    assert any(p.endswith(".keras:config.json") for p, _ in configs)  # the .keras is walked
    spec = export.card_allow_list(method)
    found = [f"card: {p}" for card in cards for p in export.disallowed_paths(card, spec)]
    for path, obj in configs:
        found += [f"{path}: {p}" for p, k in _keys(obj) if k in PRIVATE_NAMES
                  and not _documented_input(obj, p)]
    for card in cards:  # flag lines are strings, not keys
        found += [f"card flag {ln}" for ln in card.get("flags") or []
                  if ln[2:].partition("=")[0] in PRIVATE_NAMES]
    return found


def _documented_input(obj, path):
    """A "seed" that is no seed: a signature's documented input (the caller's noise seed)
    or an unseeded Keras layer's "seed": null."""
    parts = path.replace("[", ".[").split(".")[1:]
    if parts[-1] != "seed":
        return False
    if len(parts) == 4 and parts[0] == "signatures" and parts[2] == "inputs":
        return True
    for part in parts:
        obj = obj[int(part[1:-1])] if part.startswith("[") else obj[part]
    return obj is None


def test_export_passes_the_allow_list_and_a_planted_key_is_caught(tmp_path, pixeldp_export):
    method = pixeldp_export.card["run"]["method"]
    assert leaks(pixeldp_export.export_dir, method) == []
    # Positive control: the same walk fails on a private key planted in a copy of the card.
    planted = tmp_path / "planted"
    shutil.copytree(pixeldp_export.export_dir, planted)
    card = json.load(open(planted / export.CARD_FILE))
    card["certification"]["r_stats"] = {"pretrain_train_accuracy": 0.7105}
    card["data"]["normalisation_mean"] = 0.1307
    json.dump(card, open(planted / export.CARD_FILE, "w"))
    found = leaks(str(planted), method)
    assert any("certification.r_stats.pretrain_train_accuracy" in f for f in found), found
    assert any(f.endswith(": .certification.r_stats.pretrain_train_accuracy") for f in found)
    assert any("data.normalisation_mean" in f for f in found), found


def test_card_drops_keys_off_the_allow_list(tmp_path, dpsgd_run):
    run = rundir.RunDir(str(tmp_path / "run"))
    shutil.copytree(dpsgd_run.model_dir, run.path)
    config = run.read_json(rundir.CONFIG_FILE)
    # Planted: an undeclared option, a path option, statistics fitted on the training data,
    # the data fingerprint and a seed, at several depths.
    config["options"].update(dpsgd_input_mean=0.1307, hgm_r_file="/private/r.npy")
    config["certification"] = {
        "mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5,
        "r_file": "checkpoints/setup_state.npz (key r)", "input_std": 0.3081,
        "r_stats": {"pretrain_epochs": 2, "pretrain_train_accuracy": 0.7105,
                    "r_min_times_K": 0.25, "r_max_times_K": 3.5}}
    config.update(seed=1, data_sha256="ab" * 32)
    run.write_json(rundir.CONFIG_FILE, config)
    ledger = run.read_json(rundir.LEDGER_FILE)
    ledger["entries"][0]["bn_moving_mean"] = [0.5]
    run.write_json(rundir.LEDGER_FILE, ledger)
    with open(run.file(rundir.FLAGS_FILE), "a", encoding="utf-8") as f:
        f.write("--hgm_r_file=/private/r.npy\n--cpu_replicas=2\n")

    card = export.build_model_card(run, config, has_noise=False, bound="clopper_pearson",
                                   draws_per_step=8)
    assert export.disallowed_paths(card, export.card_allow_list("dpsgd")) == []
    assert [p for p, k in _keys(card) if k in PRIVATE_NAMES
            and not _documented_input(card, p)] == []
    text = json.dumps(card)
    for planted in ("dpsgd_input_mean", "/private/r.npy", "input_std", "0.7105", "r_min",
                    "bn_moving_mean", "ab" * 32, "cpu_replicas"):
        assert planted not in text, planted
    # What the allow-list names passes: declared options, public certification settings,
    # the ledger's summary and entries, the public flags.
    assert card["options"]["dpsgd_l2_clip"] == 0.5
    assert card["certification"]["r_stats"] == {"pretrain_epochs": 2}
    assert card["certification"]["construction_bound"] == 0.1
    assert card["ledger"]["epsilon"] == ledger["epsilon"]
    assert [e["name"] for e in card["ledger"]["entries"]] == [
        e["name"] for e in ledger["entries"]]
    assert "--epochs=3" in card["flags"] and "--method=dpsgd" in card["flags"]
    assert card["run"]["noise_seed"] == config.get("noise_seed")

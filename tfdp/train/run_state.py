"""A run's state before its first epoch: run key, resume checks, setup, config and checkpoint.

`RunState` is the first half of a training run (`tfdp.train.loop.Run` adds the epochs): it
derives the run key (or restores it from the checkpoint), checks a resume against the run's
files and checkpoint, runs the method's `setup` (ledger entries saved before any step),
writes config.json, flags.txt and the private state, and builds (or restores) everything
the checkpoint holds.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any, Callable, Mapping

import keras
import numpy as np
import tensorflow as tf

from tfdp import accounting, checks, rundir
from tfdp.train import integrity, ledger_check, report, resume, run_secret
from tfdp.train.base import DataSpec, Method, derive_seed
from tfdp.train.strategy import worker_name

__all__ = ["Data", "SetupError", "RunState", "RUN_STATE_NAMES"]

# Checkpoint names the run itself uses; a method's `build` may not return them.
RUN_STATE_NAMES = ("generator", "epoch", "step", "run_key", "run_secret", "ledger_digest",
                   "ledger_state", integrity.CONFIG_STATE)
# Marks the private state file (checkpoints/private_state.json): never published.
_PRIVATE_NOTE = ("private state of the run (a hash of the training arrays is a membership test "
                 "for anyone who knows the other records); never release it")


class SetupError(ValueError):
    """A method's setup rejected the run (e.g. a budget that no step fits) before training."""


@dataclasses.dataclass
class Data:
    """In-memory training and test data of a run.

    Attributes:
      x_train, y_train, x_test, y_test: arrays (x float32 NHWC, y integer labels).
      input_shape: shape of one example.
      num_classes: number of classes.
      data_dir: where the data came from (recorded in config.json), or None.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    data_dir: str | None = None


def _config_dict(method: Method, data: Data, strategy, num_train: int, num_public: int
                 ) -> dict:
    cfg = method.config
    return {
        "method": cfg.method, "dataset": cfg.dataset, "data_dir": data.data_dir,
        "value_range": list(cfg.value_range), "input_shape": list(data.input_shape),
        "num_classes": int(data.num_classes),
        # Where the noise came from; the seed itself stays in the checkpoint (issue 22).
        "noise_seed": "user_supplied" if cfg.seed is not None else "os_entropy",
        "certification": None,  # filled in after setup (it may depend on setup's results)
        "epochs": cfg.epochs, "batch_size": cfg.batch_size,
        "learning_rate": cfg.learning_rate, "optimizer": cfg.optimizer,
        "epsilon": cfg.epsilon, "delta": cfg.delta,
        "strategy": type(strategy).__name__,
        "num_replicas": int(strategy.num_replicas_in_sync),
        "num_train": int(num_train), "num_public": int(num_public),
        "num_test": int(len(data.x_test)),
        "batch_schedule": method.batch_schedule(),
        "options": dict(cfg.options),
    }


def _run_setup(method: Method, spec: DataSpec, ledger, rng: np.random.Generator, strategy
               ) -> None:
    try:
        method.setup(spec, ledger, rng, strategy)
    except ValueError as e:
        raise SetupError(str(e)) from e


class RunState:
    """A run's state up to its first epoch (`prepare`); `tfdp.train.loop.Run` trains on it.

    Build it with the same arguments as `tfdp.train.loop.train` (after their validation).
    """

    def __init__(self, method: Method, data: Data, strategy, chief: bool, *, resume: bool,
                 checkpoint_every: int, stop_after_epochs: int | None, flags_text: str | None,
                 config_extra: Mapping[str, Any] | None, verbose: int,
                 print_fn: Callable[[str], None]):
        self.method, self.data, self.strategy, self.chief = method, data, strategy, chief
        self.cfg = method.config
        self.resume = resume
        self.checkpoint_every, self.stop_after_epochs = checkpoint_every, stop_after_epochs
        self.flags_text, self.config_extra = flags_text, dict(config_extra or {})
        self.verbose, self.print_fn = verbose, print_fn
        self.rd = rundir.RunDir(self.cfg.model_dir)
        self.ckpt_dir = self.rd.file(rundir.CHECKPOINT_DIR)
        if not chief:  # other workers save to their own folder inside the run directory
            self.ckpt_dir = os.path.join(self.rd.path, "workers", worker_name(strategy))
        self.start_time = time.time()
        self.history: dict = {"segments": []}
        self.private_state: dict = {}  # checkpoints/private_state.json (data_sha256)
        self.stored_config: dict = {}
        self.spend = None  # the method's accounting.StepSpend, if it spends per step
        self.prior_segments: list = []
        self.latest_checkpoint: str | None = None
        self._pending_config: dict | None = None
        # config.json as this run last wrote it (stored with each checkpoint).
        self._config_record: dict | None = None
        self.fallback: dict | None = None  # the older checkpoint a resume fell back to

    def prepare(self) -> None:
        """Everything before the first epoch: run key, setup, config, ledger, state restored.

        After it, `make_step_fn`, `epoch_inputs` and `run_step` are the pieces `run()` trains
        with (also used by `tfdp-bench dpsgd` to time exactly this path).
        """
        fingerprint = resume.data_fingerprint(self.data.x_train, self.data.y_train)
        self._load_or_start()
        spec = self._split_public()
        config = _config_dict(self.method, self.data, self.strategy, spec.num_train,
                              self.num_public)
        config.update(self.config_extra)
        # The machine and TensorFlow build that run this process's steps: a later resume on
        # another platform charges the steps it replays again (docs/ledger.md).
        config[integrity.PLATFORM_KEY] = integrity.platform_record()
        self._check_resume(dict(config, data_sha256=fingerprint))
        self._setup(spec)
        self.spend = self.method.step_spend()
        if self.resume:
            self._check_ledger_against_checkpoint(config)
        if self.spend is not None:
            if self.spend.name in self.ledger:
                self.prior_segments = list(
                    self.ledger.get(self.spend.name).get("segments") or [])
            self.spend.record(self.ledger, self.prior_segments)
        # The certification entry may depend on setup's results (e.g. HGM's redistribution r).
        config["certification"] = self.method.certification_config()
        self._write_config(config)
        self._build()
        self._write_private_state(fingerprint)  # after build: a refused build leaves nothing

    def _load_or_start(self) -> None:
        # The run key: every random stream of the run derives from it (principle 5). It is a
        # secret: it lives only in the checkpoint (`run_secret`), never in config.json,
        # flags.txt, logs, TensorBoard or anything exported.
        self.run_secret_var = tf.Variable(b"", dtype=tf.string, trainable=False,
                                          name="run_secret")
        self.run_key_var = None  # the scalar key of checkpoints written before run_secret
        if self.resume:
            latest = self._choose_checkpoint()
            self.latest_checkpoint = latest
            self.run_key, user_supplied = self._restore_secret(latest)
            if self.cfg.seed is not None and (not user_supplied
                                              or int(self.cfg.seed) != self.run_key):
                raise ValueError(
                    "--seed: differs from the seed this run was started with"
                    if user_supplied else "--seed: this run was started without --seed (its "
                    "noise comes from OS entropy kept in its checkpoint); resume it without "
                    "--seed")
            self.ledger = accounting.PrivacyLedger.load(self.rd.file(rundir.LEDGER_FILE))
            if self.ledger.noise_seed is None:
                self.ledger.noise_seed = "user_supplied" if user_supplied else "os_entropy"
            if self.rd.exists(rundir.CONFIG_FILE) or self.chief:
                self.stored_config = self.rd.read_json(rundir.CONFIG_FILE)
            if self.chief:
                self._check_config_against_checkpoint()
            seg_path = os.path.join(rundir.checkpoint_dir(self.cfg.model_dir),
                                    rundir.SEGMENTS_FILE)
            if os.path.exists(seg_path):
                self.history = rundir.read_json(seg_path)
            private_path = os.path.join(rundir.checkpoint_dir(self.cfg.model_dir),
                                        rundir.PRIVATE_STATE_FILE)
            if os.path.exists(private_path):
                self.private_state = rundir.read_json(private_path)
        else:
            user_supplied = self.cfg.seed is not None
            self.run_key = int(self.cfg.seed) if user_supplied else run_secret.os_entropy_key()
            self.run_secret_var.assign(run_secret.encode_secret(self.run_key, user_supplied))
            self.ledger = accounting.PrivacyLedger()
            self.ledger.noise_seed = "user_supplied" if user_supplied else "os_entropy"

    def _choose_checkpoint(self) -> str:
        """The newest checkpoint that reads back completely; says which newer ones it skips.

        Raises:
          ValueError: naming the newest checkpoint when none reads back.
        """
        chosen, fallback = integrity.choose_checkpoint(rundir.checkpoint_dir(self.cfg.model_dir))
        if fallback is not None:
            reason = fallback.pop("reason")
            self.fallback = fallback
            self._say(f"resume: {fallback['damaged'][0]} is damaged ({reason}); resuming from "
                      f"the older intact checkpoint {chosen} (step {fallback['step']})")
        return chosen

    def _check_config_against_checkpoint(self) -> None:
        """Refuses a config.json that differs from the record in the checkpoint."""
        if integrity.check_config_against_checkpoint(
                self.latest_checkpoint, self.stored_config, self.rd.file(rundir.CONFIG_FILE),
                self.method.resume_mutable_flags):
            self._config_record = dict(self.stored_config)

    def _restore_secret(self, latest: str) -> tuple[int, bool]:
        """The run key from the checkpoint (`run_secret`, or an older run's `run_key`)."""
        key, user_supplied, self.run_key_var = run_secret.restore_secret(
            latest, self.run_secret_var, self.cfg.seed)
        return key, user_supplied

    def _split_public(self) -> DataSpec:
        """Removes the method's public split (chosen from the run key); attaches the method."""
        data, method = self.data, self.method
        num_all = len(data.x_train)
        self.num_public = int(method.public_split_size(num_all))
        if self.num_public:
            if not 0 < self.num_public < num_all:
                raise ValueError(f"public split: {self.num_public} records of {num_all} leaves "
                                 "no private training data")
            pub, priv = run_secret.public_split_indices(num_all, self.num_public, self.run_key)
            method.set_public_data(data.x_train[pub], data.y_train[pub])
            self.data = data = dataclasses.replace(data, x_train=data.x_train[priv],
                                                   y_train=data.y_train[priv])
        num_train = len(data.x_train)
        if num_train < self.cfg.batch_size:
            raise ValueError(f"batch_size: {self.cfg.batch_size} is larger than the "
                             f"{num_train} private training examples")
        spec = DataSpec(tuple(int(d) for d in data.input_shape), int(data.num_classes),
                        tuple(float(v) for v in self.cfg.value_range), num_train,
                        self.cfg.dataset, data.x_train, data.y_train)
        method.attach(spec, self.strategy, derive_seed(self.run_key, run_secret.STREAM_FIXED),
                      layer_seed=derive_seed(self.run_key, run_secret.STREAM_LAYERS, bits=128))
        return spec

    def _check_resume(self, config: Mapping[str, Any]) -> None:
        if not (self.resume and self.stored_config):
            return
        stored = dict(self.stored_config)  # a run before issue 40 kept data_sha256 here
        if "data_sha256" in self.private_state:
            stored["data_sha256"] = self.private_state["data_sha256"]
        conflicts = resume.resume_conflicts(stored, config,
                                            tuple(self.method.resume_mutable_flags))
        if conflicts:
            raise resume.conflict_error(self.rd.path, conflicts)

    def _setup(self, spec: DataSpec) -> None:
        """Host-side setup: once per run; on resume from its saved state, or re-run and
        checked to reproduce the run's setup ledger entries."""
        method = self.method
        setup_rng = np.random.default_rng(derive_seed(self.run_key, run_secret.STREAM_SETUP))
        setup_path = os.path.join(rundir.checkpoint_dir(self.cfg.model_dir),
                                  rundir.SETUP_STATE_FILE)
        if self.resume and os.path.exists(setup_path):
            method.restore_setup_state(rundir.load_arrays(setup_path))
        elif self.resume:
            scratch = accounting.PrivacyLedger()
            _run_setup(method, spec, scratch, setup_rng, self.strategy)
            kept = {e["name"]: e for e in self.ledger.entries if e.get("segments") is None}
            if {e["name"]: e for e in scratch.entries} != kept:
                raise RuntimeError("setup changed the privacy ledger on resume; the method's "
                                   "setup is not deterministic given its rng, so resuming "
                                   "would spend budget again")
        else:
            started = time.time()
            self._say(f"{self.cfg.method}: setup before the first step (e.g. pre-training, "
                      "private statistics; some methods take minutes here)")
            _run_setup(method, spec, self.ledger, setup_rng, self.strategy)
            self._say(f"{self.cfg.method}: setup done in "
                      f"{report.seconds_text(time.time() - started)}")
            os.makedirs(self.rd.path, exist_ok=True)
            state = method.setup_state()
            if state and self.chief:
                rundir.save_arrays(setup_path, state)

    def _say(self, text: str) -> None:
        """A progress message on the chief, flushed at once (logs show it while it runs)."""
        if self.verbose and self.chief:
            self.print_fn(text)
            sys.stdout.flush()

    def _write_config(self, config: dict) -> None:
        if not self.chief:
            self._config_record = dict(config)
            return
        rd, cfg = self.rd, self.cfg
        if not self.resume:
            if self.flags_text is not None:
                rd.write_text(rundir.FLAGS_FILE, self.flags_text)
            rd.write_json(rundir.CONFIG_FILE, config)
            self._config_record = rd.read_json(rundir.CONFIG_FILE)
        elif self.stored_config:
            updated = dict(self.stored_config)
            updated.pop("data_sha256", None)  # moved to the private state (issue 40)
            for key in self.method.resume_mutable_flags:
                if key in config and key != "options":
                    updated[key] = config[key]
            new_flags = self.config_extra.get("flags")
            if new_flags:  # the flags of the latest segment; a later resume starts from them
                updated["flags"] = new_flags
            for key in ("cpu_replicas", "num_replicas", "strategy", integrity.PLATFORM_KEY):
                if key in config:
                    updated[key] = config[key]
            updated.setdefault("resumes", []).append(
                {"epochs": cfg.epochs, "batch_size": cfg.batch_size,
                 "num_replicas": int(self.strategy.num_replicas_in_sync), "time": time.time()})
            # Written when the first step of the resume is about to run: a resume that runs
            # nothing writes nothing.
            self._pending_config = updated
            return
        self.ledger.save(rd.file(rundir.LEDGER_FILE))

    def _write_private_state(self, fingerprint: str) -> None:
        """Writes checkpoints/private_state.json: the training data's hash (resume checks).

        The hash of the private training arrays is a membership test, so it is kept in the
        private checkpoint folder, never in config.json (issue 40).
        """
        if not self.chief or self.private_state.get("data_sha256") == fingerprint:
            return
        self.private_state = {"never_release": _PRIVATE_NOTE, "data_sha256": fingerprint}
        rundir.write_json_atomic(os.path.join(rundir.checkpoint_dir(self.cfg.model_dir),
                                              rundir.PRIVATE_STATE_FILE), self.private_state)

    def _refresh_config(self, updates: dict | None) -> None:
        """Writes a method's per-epoch config.json entries (chief only; the run's file)."""
        if not updates or not self.chief or not self.rd.exists(rundir.CONFIG_FILE):
            return
        config = self.rd.read_json(rundir.CONFIG_FILE)
        config.update(updates)
        self.rd.write_json(rundir.CONFIG_FILE, config)
        self._config_record = self.rd.read_json(rundir.CONFIG_FILE)

    def _flush_pending(self) -> None:
        """Writes the resume's config.json update and ledger (before its first step)."""
        if self._pending_config is not None and self.chief:
            self.rd.write_json(rundir.CONFIG_FILE, self._pending_config)
            self._config_record = self.rd.read_json(rundir.CONFIG_FILE)
            self.ledger.save(self.rd.file(rundir.LEDGER_FILE))
        self._pending_config = None

    def _check_ledger_against_checkpoint(self, config: Mapping[str, Any]) -> None:
        """Refuses a resume whose ledger.json is not the run's; drops replayed charges.

        ledger.json must be the ledger saved with the checkpoint or that ledger with its
        per-step entry charged further (`ledger_check.ledger_at_checkpoint`). The steps
        charged after the checkpoint are recomputed by this resume with the same lots and
        noise (both keyed by the run's secret key and the step's position) when the resume
        runs them with the same settings as the stopped process: they release nothing new,
        and the ledger restarts from the checkpoint's (docs/ledger.md). Otherwise they stay
        charged and the resume charges its steps again.
        """
        latest = self.latest_checkpoint
        ran, charged, saved_ledger = ledger_check.ledger_at_checkpoint(
            latest, self.rd.file(rundir.LEDGER_FILE), self.ledger, self.spend)
        if saved_ledger is None or self.spend is None or charged == ran:
            return
        multi_worker = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        if multi_worker:
            differences = ["multi-worker steps are not verified to replay bit for bit"]
        elif not self.method.replays_identically():
            differences = [f"{self.cfg.method}'s steps with these settings do not replay bit "
                           "for bit"]
        else:
            differences = integrity.replay_differences(self.stored_config, config)
        if differences:
            self._say(f"resume: the {charged - ran} steps after the checkpoint {latest} are "
                      "charged again: this resume does not recompute them bit for bit ("
                      + "; ".join(differences) + ")")
            return
        saved_ledger.noise_seed = self.ledger.noise_seed
        self.ledger = saved_ledger
        self._say(f"resume: from step {ran} ({latest}); the {charged - ran} steps run after it "
                  "are replayed with the same lots and noise and charged once")

    def _build(self) -> None:
        """The method's state (inside the strategy scope), the run's counters, the checkpoint."""
        # Weight initialisation protects nothing; Keras takes a 32-bit seed.
        keras.utils.set_random_seed(derive_seed(self.run_key, run_secret.STREAM_INIT, bits=31))
        with self.strategy.scope():
            objects = self.method.build()
        objects = checks.check_trackables(objects, f"build: {type(self.method).__name__}")
        clash = sorted(set(objects) & set(RUN_STATE_NAMES))
        if clash:
            raise ValueError(f"build: {type(self.method).__name__} returned {clash}, names the "
                             f"run keeps for its own state {list(RUN_STATE_NAMES)}")
        if "model" not in objects:
            raise ValueError(f"build: {type(self.method).__name__} returned no 'model' (the "
                             "model that is evaluated and saved)")
        self.model = objects["model"]
        self.generator = tf.random.Generator.from_seed(derive_seed(self.run_key, run_secret.STREAM_STEPS))
        self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        # The ledger as saved with each checkpoint (private state; checked on resume).
        self.ledger_state_var = tf.Variable(b"", dtype=tf.string, trainable=False,
                                            name="ledger_state")
        run_state = ({"run_key": self.run_key_var} if self.run_key_var is not None
                     else {"run_secret": self.run_secret_var})
        # The run's configuration as config.json holds it (private state; checked on resume).
        self.config_state_var = tf.Variable(b"", dtype=tf.string, trainable=False,
                                            name=integrity.CONFIG_STATE)
        # A checkpoint written before the ledger (or configuration) was stored with it keeps
        # its old layout.
        names = integrity.checkpoint_names(self.latest_checkpoint) if self.resume else None
        if names is None or "ledger_state" in names:
            run_state["ledger_state"] = self.ledger_state_var
        if names is None or integrity.CONFIG_STATE in names:
            run_state[integrity.CONFIG_STATE] = self.config_state_var
        ckpt = tf.train.Checkpoint(generator=self.generator, epoch=self.epoch_var,
                                   step=self.step_var, **run_state, **objects)
        self.manager = tf.train.CheckpointManager(ckpt, self.ckpt_dir, max_to_keep=2)
        if self.resume:
            latest = self.latest_checkpoint
            try:
                status = ckpt.restore(latest)
                status.assert_existing_objects_matched()
            except (tf.errors.OpError, AssertionError, ValueError, IndexError) as e:
                raise ValueError(f"{latest}: the checkpoint does not match this run's model "
                                 f"and state ({e})") from None


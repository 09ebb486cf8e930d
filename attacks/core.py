"""FGSM, I-FGSM, MIM and Madry-PGD built on CleverHans' TF2 attack code, compiled and batched.

Conventions shared by every attack:

- `model_fn` maps a batch to logits. `x` lies in the data's value range
  [clip_min, clip_max]; adversarial examples are clipped to it after every step.
- `eps` is measured in the units of that range. The papers state sizes on [-1, 1]
  (StoBatch, HGM on CIFAR-10) or on [0, 1] (HGM on MNIST); the same perturbation is
  twice as large a number on [-1, 1] as on [0, 1]. `rescale_size` converts explicitly.
- `y=None` crafts against the model's own predictions (no label leaking, Kurakin et al.
  2017); pass the true labels to attack them instead.
- `eot_draws=k > 1` attacks a noisy model fairly (expectation over transformation,
  Athalye et al. 2018; PixelDP code release, 20 draws): each gradient is the average of
  the gradients of the loss over k noise draws of `model_fn`.

CleverHans 4.0.0's `basic_iterative_method` and `madry_et_al` fail under numpy 2 with
their default `sanity_checks=True` (they call `np.all` on a ragged list), and its
`projected_gradient_descent` asserts `eps_iter <= eps` in Python, which rules out a
tensor-valued `eps` inside a compiled graph. The iterative attacks therefore run
CleverHans' own step (`fast_gradient_method`) and projection (`clip_eta`) in a graph
loop, and the checks the sanity flag was meant to make are done here instead: the input
lies in the clip range, `0 < eps_iter`, `eps` fits inside the range (before any work,
as ValueError), and the output lies in the clip range and in the eps-ball (graph
assertions after the attack).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method
from cleverhans.tf2.utils import clip_eta, compute_gradient, optimize_linear

from tfdp import checks, tf_options
from attacks import graph

tf_options.configure_tensorflow()  # bit-reproducible tf.function graphs (tfdp/tf_options.py)

ATTACKS = ("fgsm", "ifgsm", "mim", "madry")
ModelFn = Callable[[tf.Tensor], tf.Tensor]

# Compiled attacks per model function, keyed by the function object itself (never by its id,
# which a new object can reuse). The compiled graphs close over their model function, so the
# table is bounded and cleared when it grows past _CACHE_SIZE functions.
_CACHE_SIZE = 64
_cache: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_TOLERANCE = 1e-5  # float32 slack for the post-attack ball / range assertions


def rescale_size(eps: float, from_range: Sequence[float] = (0.0, 1.0),
                 to_range: Sequence[float] = (-1.0, 1.0)) -> float:
    """Converts an attack size between value ranges (e.g. 0.1 on [0, 1] is 0.2 on [-1, 1]).

    Args:
        eps: attack size measured on `from_range`.
        from_range: (low, high) of the range eps refers to.
        to_range: (low, high) of the target range.

    Returns:
        the same perturbation measured on `to_range`.

    Raises:
        ValueError: if eps < 0 or a range is empty.
    """
    eps = checks.check_nonnegative(eps, "eps (attack size)")
    lo_a, hi_a = checks.check_interval(from_range, "from_range")
    lo_b, hi_b = checks.check_interval(to_range, "to_range")
    return eps * (hi_b - lo_b) / (hi_a - lo_a)


def fgsm(model_fn: ModelFn, x: Any, eps: float, clip_min: float = -1.0,
         clip_max: float = 1.0, y: Any = None, norm: float = np.inf, *,
         eot_draws: int = 1) -> tf.Tensor:
    """Fast gradient (sign) method, Goodfellow et al. 2015, one step of size eps.

    Args:
        model_fn: maps a batch to logits.
        x: inputs in [clip_min, clip_max].
        eps: attack size >= 0 in the data's units.
        clip_min: lower end of the data's value range.
        clip_max: upper end of the data's value range.
        y: labels to move away from; None uses the model's predictions.
        norm: np.inf, 1 or 2.
        eot_draws: noise draws averaged per gradient (1 = plain gradient).

    Returns:
        adversarial examples (float32 tensor shaped like x).

    Raises:
        ValueError: on bad arguments, before any work.
    """
    return run_attack("fgsm", model_fn, x, eps, clip_min, clip_max, y, norm,
                      eot_draws=eot_draws)


def ifgsm(model_fn: ModelFn, x: Any, eps: float, clip_min: float = -1.0,
          clip_max: float = 1.0, y: Any = None, norm: float = np.inf, *,
          nb_iter: int = 10, eps_iter: Optional[float] = None,
          eot_draws: int = 1) -> tf.Tensor:
    """Iterative FGSM / basic iterative method (Kurakin et al. 2017), no random start.

    Args:
        model_fn: maps a batch to logits.
        x: inputs in [clip_min, clip_max].
        eps: attack size >= 0 in the data's units.
        clip_min: lower end of the data's value range.
        clip_max: upper end of the data's value range.
        y: labels to move away from; None uses the model's predictions.
        norm: np.inf or 2.
        nb_iter: iterations T (the HGM experiments: 10 on MNIST, 3 on CIFAR-10).
        eps_iter: step size; default eps / nb_iter (the HGM authors' code release).
        eot_draws: noise draws averaged per gradient.

    Returns:
        adversarial examples.

    Raises:
        ValueError: on bad arguments, before any work.
    """
    return run_attack("ifgsm", model_fn, x, eps, clip_min, clip_max, y, norm,
                      nb_iter=nb_iter, eps_iter=eps_iter, eot_draws=eot_draws)


def mim(model_fn: ModelFn, x: Any, eps: float, clip_min: float = -1.0,
        clip_max: float = 1.0, y: Any = None, norm: float = np.inf, *,
        nb_iter: int = 10, eps_iter: Optional[float] = None, decay_factor: float = 1.0,
        eot_draws: int = 1) -> tf.Tensor:
    """Momentum iterative method (Dong et al. 2018), CleverHans' update rule.

    Args:
        model_fn: maps a batch to logits.
        x: inputs in [clip_min, clip_max].
        eps: attack size >= 0 in the data's units.
        clip_min: lower end of the data's value range.
        clip_max: upper end of the data's value range.
        y: labels to move away from; None uses the model's predictions.
        norm: np.inf or 2.
        nb_iter: iterations.
        eps_iter: step size; default eps / nb_iter.
        decay_factor: momentum decay mu (1.0 in the papers' code).
        eot_draws: noise draws averaged per gradient.

    Returns:
        adversarial examples.

    Raises:
        ValueError: on bad arguments, before any work.
    """
    return run_attack("mim", model_fn, x, eps, clip_min, clip_max, y, norm,
                      nb_iter=nb_iter, eps_iter=eps_iter, decay_factor=decay_factor,
                      eot_draws=eot_draws)


def madry(model_fn: ModelFn, x: Any, eps: float, clip_min: float = -1.0,
          clip_max: float = 1.0, y: Any = None, norm: float = np.inf, *,
          nb_iter: int = 10, eps_iter: Optional[float] = None, rand_init: bool = True,
          seed: Any = None, eot_draws: int = 1) -> tf.Tensor:
    """Madry et al. 2018 projected gradient descent with a uniform random start.

    Args:
        model_fn: maps a batch to logits.
        x: inputs in [clip_min, clip_max].
        eps: attack size >= 0 in the data's units.
        clip_min: lower end of the data's value range.
        clip_max: upper end of the data's value range.
        y: labels to move away from; None uses the model's predictions.
        norm: np.inf or 2.
        nb_iter: iterations.
        eps_iter: step size; default eps / nb_iter.
        rand_init: start from a uniform point in the eps-ball.
        seed: int or shape-[2] int seed of the stateless random start; None draws one
            from OS entropy.
        eot_draws: noise draws averaged per gradient.

    Returns:
        adversarial examples.

    Raises:
        ValueError: on bad arguments, before any work.
    """
    return run_attack("madry", model_fn, x, eps, clip_min, clip_max, y, norm,
                      nb_iter=nb_iter, eps_iter=eps_iter, rand_init=rand_init, seed=seed,
                      eot_draws=eot_draws)


def run_attack(name: str, model_fn: ModelFn, x: Any, eps: float, clip_min: float = -1.0,
               clip_max: float = 1.0, y: Any = None, norm: float = np.inf, *,
               nb_iter: int = 10, eps_iter: Optional[float] = None,
               decay_factor: float = 1.0, rand_init: bool = True, seed: Any = None,
               eot_draws: int = 1) -> tf.Tensor:
    """Runs the attack called `name` (one of ATTACKS); see the individual attacks.

    Raises:
        ValueError: on an unknown name or bad arguments, before any work.
    """
    if name not in ATTACKS:
        raise ValueError(f"attack name must be one of {ATTACKS}, got {name!r}")
    if not callable(model_fn):
        raise ValueError("model_fn must be callable")
    if not tf.executing_eagerly():
        return _in_graph(name, model_fn, x, eps, clip_min, clip_max, y, norm, nb_iter=nb_iter,
                         eps_iter=eps_iter, decay_factor=decay_factor, rand_init=rand_init,
                         seed=seed, eot_draws=eot_draws)
    eps = checks.check_nonnegative(eps, "eps (attack size)")
    clip_min, clip_max = checks.check_interval((clip_min, clip_max), "clip_min/clip_max")
    if norm not in (np.inf, 1, 2):
        raise ValueError(f"norm must be np.inf, 1 or 2, got {norm!r}")
    if name != "fgsm" and norm == 1:
        raise ValueError("norm=1 is supported by fgsm only (CleverHans does not support "
                         "iterative l1 attacks)")
    if norm == np.inf and eps > clip_max - clip_min:
        raise ValueError(f"eps={eps} exceeds the width of the clip range "
                         f"[{clip_min}, {clip_max}]")
    nb_iter = int(nb_iter)
    if nb_iter < 1:
        raise ValueError(f"nb_iter must be >= 1, got {nb_iter}")
    if eps_iter is None:
        eps_iter = eps / nb_iter  # steps of mu_a / T_mu, as in the HGM code release
    eps_iter = float(eps_iter)
    if not math.isfinite(eps_iter) or eps_iter < 0 or (eps > 0 and eps_iter == 0):
        raise ValueError(f"eps_iter must be > 0, got {eps_iter!r}")
    eot_draws = int(eot_draws)
    if eot_draws < 1:
        raise ValueError(f"eot_draws must be >= 1, got {eot_draws}")
    x = tf.convert_to_tensor(x, tf.float32)
    if x.shape.rank is None or x.shape.rank < 2:
        raise ValueError("x must be a batch of shape (batch, ...)")
    if int(tf.size(x)) == 0:
        raise ValueError("x must be a non-empty batch")
    x_min = float(tf.reduce_min(x))
    x_max = float(tf.reduce_max(x))
    if x_min < clip_min - _TOLERANCE or x_max > clip_max + _TOLERANCE:
        raise ValueError(f"x has values in [{x_min}, {x_max}], outside the clip range "
                         f"[{clip_min}, {clip_max}]; pass the data's value range")
    if y is not None:
        y = tf.convert_to_tensor(y)
        if not y.dtype.is_integer or y.shape.rank != 1 or int(y.shape[0]) != int(x.shape[0]):
            raise ValueError("y must be integer labels of shape (batch,)")
        y = tf.cast(y, tf.int64)
    seed_t = _seed_tensor(seed)
    fn = _compiled(name, model_fn, float(norm), nb_iter, clip_min, clip_max,
                   float(decay_factor), bool(rand_init), eot_draws, y is not None)
    args = [x, tf.constant(eps, tf.float32), tf.constant(eps_iter, tf.float32), seed_t]
    if y is not None:
        args.append(y)
    return fn(*args)


def ensemble(model_fn: ModelFn, x: Any, *, rng: Any, max_eps: float = 1.0,
             attacks: Sequence[str] = ("ifgsm", "mim", "madry"),
             clip_min: float = -1.0, clip_max: float = 1.0, y: Any = None,
             nb_iter: int = 10, eot_draws: int = 1) -> tuple[tf.Tensor, float]:
    """Splits a batch into equal contiguous parts, one per attack, at one random size.

    StoBatch Alg. 1 lines 6-11 (Eq. 7-8): each step draws mu_t uniformly in (0, max_eps]
    and crafts the adversarial batch with an ensemble of attacks, each on its share of the
    batch (m / |A| examples each; the first `b mod |A|` parts get one more example).

    Args:
        model_fn: maps a batch to logits.
        x: batch in [clip_min, clip_max].
        rng: np.random.Generator (or int seed) for the size and the PGD starts.
        max_eps: upper end of the size's range, in the data's units.
        attacks: names from ATTACKS.
        clip_min: lower end of the data's value range.
        clip_max: upper end of the data's value range.
        y: labels to move away from; None uses the model's predictions.
        nb_iter: iterations of the iterative attacks (T_mu).
        eot_draws: noise draws averaged per gradient.

    Returns:
        (adversarial batch in the original order, the size mu_t used).

    Raises:
        ValueError: on bad arguments, before any work.
    """
    attacks = list(attacks)
    if not attacks or any(a not in ATTACKS for a in attacks):
        raise ValueError(f"attacks must be a non-empty list of names from {ATTACKS}, got "
                         f"{attacks!r}")
    max_eps = checks.check_nonnegative(max_eps, "max_eps (attack size)")
    if max_eps == 0:
        raise ValueError("max_eps must be > 0")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    x = tf.convert_to_tensor(x, tf.float32)
    b = int(x.shape[0])
    if b < len(attacks):
        raise ValueError(f"x has {b} examples, fewer than the {len(attacks)} attacks")
    # StoBatch Alg. 1 lines 6-11: mu_t uniform in (0, max_eps]
    eps = float(max_eps * (1.0 - rng.random()))
    sizes = [b // len(attacks) + (1 if i < b % len(attacks) else 0)
             for i in range(len(attacks))]
    parts = []
    start = 0
    for name, size in zip(attacks, sizes):
        part_y = None if y is None else tf.convert_to_tensor(y)[start:start + size]
        seed = rng.integers(0, 2**31 - 1, size=2)
        parts.append(run_attack(name, model_fn, x[start:start + size], eps, clip_min,
                                clip_max, part_y, nb_iter=nb_iter, seed=seed,
                                eot_draws=eot_draws))
        start += size
    return tf.concat(parts, axis=0), eps


# ------------------------------------------------------------------------------ internals


def _in_graph(name: str, model_fn: ModelFn, x: Any, eps: Any, clip_min: float,
              clip_max: float, y: Any, norm: float, *, nb_iter: int, eps_iter: Any,
              decay_factor: float, rand_init: bool, seed: Any, eot_draws: int) -> tf.Tensor:
    """`run_attack` inside a `tf.function` or `strategy.run`: the graph-safe `attacks.graph`.

    The same adversarial examples as the eager call (tests/attacks/test_graph.py): FGSM is
    one I-FGSM step of size eps, and Madry's random start is the eager call's stateless
    uniform draw for the same `seed` over this batch. Python arguments are checked as in
    the eager call; data-dependent checks (x inside the clip range) are not possible in a
    graph, and a Madry attack needs an explicit `seed` (no OS entropy inside a graph).

    Raises:
        ValueError: for a norm other than l_inf, eot_draws != 1, a missing Madry seed or a
            bad Python argument.
    """
    if norm != np.inf:
        raise ValueError(f"norm: only np.inf inside a tf.function, got {norm!r}")
    if int(eot_draws) != 1:
        raise ValueError("eot_draws: only 1 inside a tf.function")
    clip_min, clip_max = checks.check_interval((clip_min, clip_max), "clip_min/clip_max")
    nb_iter = 1 if name == "fgsm" else int(nb_iter)
    if nb_iter < 1:
        raise ValueError(f"nb_iter must be >= 1, got {nb_iter}")
    if isinstance(eps, (int, float)):
        eps = checks.check_nonnegative(eps, "eps (attack size)")
    if name == "fgsm":
        eps_iter = None  # one step of size eps
    x = tf.convert_to_tensor(x, tf.float32)
    start = None
    if name == "madry" and rand_init:
        if seed is None:
            raise ValueError("seed: a Madry attack inside a tf.function needs an explicit seed")
        seed_t = seed if tf.is_tensor(seed) else _seed_tensor(seed)
        start = tf.random.stateless_uniform(tf.shape(x), seed_t, -1.0, 1.0)
    ids = tf.fill(tf.shape(x)[:1], graph.ATTACK_IDS[name])
    return graph.craft(model_fn, x, eps, attack_ids=ids, nb_iter=nb_iter, eps_iter=eps_iter,
                       start_noise=start, labels=y, clip_min=clip_min, clip_max=clip_max,
                       decay=float(decay_factor))


def _compiled(name: str, model_fn: ModelFn, norm: float, nb_iter: int, clip_min: float,
              clip_max: float, decay: float, rand_init: bool, eot_draws: int,
              has_labels: bool) -> Callable:
    """Returns a tf.function for one attack configuration (cached per live model_fn)."""
    key = (name, norm, nb_iter, clip_min, clip_max, decay, rand_init, eot_draws, has_labels)
    try:
        if model_fn not in _cache and len(_cache) >= _CACHE_SIZE:
            _cache.clear()
        per_fn = _cache.setdefault(model_fn, {})
    except TypeError:  # not weakly referenceable: compile without caching
        per_fn = {}
    hit = per_fn.get(key)
    if hit is not None:
        return hit
    norm_v = np.inf if math.isinf(norm) else int(norm)
    model, loss_fn = _eot_wrap(model_fn, eot_draws)

    def attack(x, eps, eps_iter, seed, y=None):
        if y is None:
            # CleverHans convention: the model's own predictions, no label leaking
            y = _predict(model_fn, x, eot_draws)
        if name == "fgsm":
            adv = fast_gradient_method(model, x, eps, norm_v, loss_fn, clip_min=clip_min,
                                       clip_max=clip_max, y=y)
        elif name == "mim":
            adv = _mim_loop(model, loss_fn, x, y, eps, eps_iter, nb_iter, norm_v, clip_min,
                            clip_max, decay)
        else:
            adv = x
            if name == "madry" and rand_init:
                adv = tf.clip_by_value(x + _random_start(tf.shape(x), norm_v, eps, seed),
                                       clip_min, clip_max)
            adv = _pgd_loop(model, loss_fn, x, adv, y, eps, eps_iter, nb_iter, norm_v,
                            clip_min, clip_max)
        return _assert_valid(x, adv, eps, norm_v, clip_min, clip_max)

    fn = tf.function(attack, reduce_retracing=True)
    per_fn[key] = fn
    return fn


def _eot_wrap(model_fn: ModelFn, draws: int) -> tuple[ModelFn, Callable]:
    """Model and loss whose input gradient is the mean over `draws` noise draws."""
    if draws == 1:
        return model_fn, tf.nn.sparse_softmax_cross_entropy_with_logits

    def model(x):
        rank_ones = tf.ones([tf.rank(x) - 1], tf.int32)
        logits = model_fn(tf.tile(x, tf.concat([[draws], rank_ones], 0)))  # (draws*b, K)
        k = tf.shape(logits)[-1]
        logits = tf.reshape(logits, [draws, -1, k])
        return tf.reshape(tf.transpose(logits, [1, 0, 2]), [-1, draws * k])  # (b, draws*K)

    def loss_fn(labels, logits):
        per_draw = tf.reshape(logits, [tf.shape(logits)[0], draws, -1])
        labels = tf.repeat(labels[:, None], draws, axis=1)
        # EOT (Athalye et al. 2018): mean over draws of the cross-entropy
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=per_draw),
            axis=1)

    return model, loss_fn


def _predict(model_fn: ModelFn, x: tf.Tensor, draws: int) -> tf.Tensor:
    if draws == 1:
        return tf.argmax(model_fn(x), axis=1)
    model, _ = _eot_wrap(model_fn, draws)
    logits = model(x)
    probs = tf.nn.softmax(tf.reshape(logits, [tf.shape(x)[0], draws, -1]), axis=-1)
    return tf.argmax(tf.reduce_mean(probs, axis=1), axis=1)


def _pgd_loop(model, loss_fn, x, adv, y, eps, eps_iter, nb_iter, norm, clip_min, clip_max):
    # Madry et al. 2018 / Kurakin et al. 2017: FGM step, project onto the ball, clip
    # (the loop of CleverHans' projected_gradient_descent, run as a graph loop).
    for _ in tf.range(nb_iter):
        adv = fast_gradient_method(model, adv, eps_iter, norm, loss_fn, clip_min=clip_min,
                                   clip_max=clip_max, y=y)
        adv = x + clip_eta(adv - x, norm, eps)
        adv = tf.ensure_shape(tf.clip_by_value(adv, clip_min, clip_max), x.shape)
    return adv


def _mim_loop(model, loss_fn, x, y, eps, eps_iter, nb_iter, norm, clip_min, clip_max,
              decay):
    # Dong et al. 2018, Alg. 1 as in CleverHans' momentum_iterative_method: gradient
    # normalised by its mean absolute value, accumulated with decay, then a
    # steepest-ascent step of eps_iter, projection and clipping.
    momentum = tf.zeros_like(x)
    adv = x
    red = list(range(1, x.shape.rank))
    for _ in tf.range(nb_iter):
        grad = compute_gradient(model, loss_fn, adv, y, False)
        grad = grad / tf.maximum(tf.constant(1e-12, grad.dtype),
                                 tf.reduce_mean(tf.abs(grad), red, keepdims=True))
        momentum = decay * momentum + grad
        adv = adv + optimize_linear(momentum, eps_iter, norm)
        adv = x + clip_eta(adv - x, norm, eps)
        adv = tf.ensure_shape(tf.clip_by_value(adv, clip_min, clip_max), x.shape)
    return adv


def _random_start(shape, norm, eps, seed):
    """Uniform point in the eps-ball (l_inf: uniform cube; l2: uniform ball), stateless."""
    if norm == np.inf:
        return tf.random.stateless_uniform(shape, seed, -1.0, 1.0) * eps
    seeds = tf.random.experimental.stateless_split(seed, 2)
    direction = tf.random.stateless_normal(shape, seeds[0])
    flat = tf.reshape(direction, [shape[0], -1])
    direction = direction / tf.reshape(tf.norm(flat, axis=1) + 1e-12,
                                       tf.concat([[shape[0]], tf.ones_like(shape[1:])], 0))
    dim = tf.cast(tf.reduce_prod(shape[1:]), tf.float32)
    radius = tf.random.stateless_uniform([shape[0]], seeds[1]) ** (1.0 / dim) * eps
    return direction * tf.reshape(radius, tf.concat([[shape[0]], tf.ones_like(shape[1:])], 0))


def _assert_valid(x, adv, eps, norm, clip_min, clip_max):
    """The post-attack half of CleverHans' sanity checks, as graph assertions."""
    delta = tf.reshape(adv - x, [tf.shape(x)[0], -1])
    if norm == np.inf:
        size = tf.reduce_max(tf.abs(delta), axis=1)
    else:
        size = tf.norm(delta, ord=norm, axis=1)
    checks = [
        tf.debugging.assert_less_equal(size, eps * (1.0 + _TOLERANCE) + _TOLERANCE,
                                       message="adversarial example outside the eps-ball"),
        tf.debugging.assert_greater_equal(adv, tf.cast(clip_min, adv.dtype),
                                          message="adversarial example below clip_min"),
        tf.debugging.assert_less_equal(adv, tf.cast(clip_max, adv.dtype),
                                       message="adversarial example above clip_max"),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(adv)


def _seed_tensor(seed: Any) -> tf.Tensor:
    if seed is None:
        seed = np.random.SeedSequence().generate_state(2) % (2**31 - 1)
    arr = np.asarray(seed, dtype=np.int64).reshape(-1)
    if arr.size == 1:
        arr = np.array([arr[0], 0], dtype=np.int64)
    if arr.size != 2:
        raise ValueError(f"seed must be an int or a pair of ints, got {seed!r}")
    return tf.constant(arr, tf.int64)

"""Crawl seed operators from torch and transformers by introspection and trial runs.

Every public operator found is tried on small tensors of ranks 1 to 5 with recipes derived from
its signature (constructor argument names say which input dimension they take, or what size to
choose) and, for builtins without a signature, a few generic call patterns. What runs, keeps the
batch dimension, has a meta kernel (for shape propagation), is deterministic and computes
something becomes a catalogue entry; everything else is logged with the reason it was dropped.
"""

from __future__ import annotations

import collections
import hashlib
import importlib
import importlib.util
import inspect
import pkgutil
import random
import re
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from .catalogue import Catalogue, CrawlRecord, OperatorSpec
from .recipes import AppliedOp, NotApplicable, bind, import_target, propagate
from .signature import is_stochastic, normalise

SOURCES = ("torch.nn", "torch.nn.functional", "torch", "torch.special", "transformers")
# Dimensions chosen distinct so the shape rule shows which one an operator changed; the batch
# (3) is odd so an operator that silently needs an even batch fails here, not in a task.
TRIAL_SHAPES = {1: (3,), 2: (3, 12), 3: (3, 12, 10), 4: (3, 12, 10, 8), 5: (3, 12, 6, 5, 4)}
TRIAL_TIMEOUT_S = 10
SIZE_CHOICES = [64, 128, 256, 512, 1024]  # output widths (out_features, out_channels, ...)

# Constructor or call argument names, and what to give them.
INPUT_NAMES = (
    "in_features", "in_channels", "num_features", "num_channels", "normalized_shape", "d_model",
    "embed_dim", "input_size", "hidden_size", "dim", "channels", "features", "n_embd",
    "hidden_dim", "size", "in_dim", "embedding_dim",
)
OUTPUT_NAMES = (
    "out_features", "out_channels", "hidden_size", "proj_size", "out_size", "intermediate_size",
    "dim_feedforward", "d_ff", "out_dim", "embedding_dim", "ffn_dim",
)
NAMED_RECIPES = {
    "kernel_size": {"choice": [3, 2, 5]},
    "output_size": {"choice": [1, 2, 4]},
    "upscale_factor": {"value": 2},
    "downscale_factor": {"value": 2},
    "scale_factor": {"value": 2.0},
    "padding": {"choice": [1, 2]},
    "pad": {"value": [1, 1]},
    "value": {"value": 0.0},
    "p": {"value": 2.0},
    "norm_type": {"value": 2.0},
    "threshold": {"value": 0.1},
    "lambd": {"value": 0.5},
    "k": {"value": 2},
    "repeats": {"value": 2},
    "n_rep": {"value": 2},
    "dims": {"value": [-1]},
    "exponent": {"value": 2.0},
}
DIVISOR_NAMES = ("num_groups", "num_heads", "nhead", "groups", "n_heads")
TENSOR_NAMES = ("weight", "other", "tensor", "tensor2", "vec", "mat2", "input2", "exponent")
# Builtins have no signature: these call patterns are tried in order.
GENERIC_CALLS = (
    ([], {}),
    ([], {"dim": {"value": -1}}),
    ([{"param": "last"}], {}),
    ([{"value": 2}], {}),
    ([{"value": 0.5}], {}),
    ([], {"dim": {"value": 1}}),
    ([{"param": "channel"}], {}),
)
CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Container", "Module"}
TRANSFORMERS_CLASS = re.compile(r"(Norm|MLP|FeedForward|FFN|Activation|Act|GLU|GELU|RotaryEmbedding|Attention)$")
TRANSFORMERS_FUNCTION = re.compile(r"(rotate|repeat_kv|rotary|rope|norm|gelu|swish|glu|softmax|act)")


class TrialFailure(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


@dataclass
class Found:
    """An operator the crawl looks at, before any trial."""

    name: str
    source: str
    kind: str
    target: str
    obj: object


@contextmanager
def _time_limit(seconds: int):
    def expire(signum, frame):
        raise TrialFailure("too slow on a tiny input", f"over {seconds} s")

    try:
        previous = signal.signal(signal.SIGALRM, expire)
    except ValueError:  # not the main thread: no alarm, rely on the small trial sizes
        yield
        return
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- enumeration ---------------------------------------------------------------------------------


def _torch_nn() -> Iterator[Found]:
    for name in sorted(dir(nn)):
        obj = getattr(nn, name)
        if inspect.isclass(obj) and issubclass(obj, nn.Module):
            yield Found(f"nn.{name}", "torch.nn", "module", f"torch.nn.{name}", obj)


def _functional() -> Iterator[Found]:
    import torch.nn.functional as F

    for name in sorted(dir(F)):
        obj = getattr(F, name)
        if name.startswith("_") or not callable(obj) or inspect.isclass(obj) or inspect.ismodule(obj):
            continue
        if getattr(obj, "__module__", "") in ("typing", "warnings") or name[0].isupper():
            continue
        yield Found(f"F.{name}", "torch.nn.functional", "function", f"torch.nn.functional.{name}", obj)


def _tensor_math() -> Iterator[Found]:
    # The torch functions that are also Tensor methods are its tensor math; the rest of the
    # namespace (save, manual_seed, set_*) is not an operator and is never called.
    for name in sorted(dir(torch)):
        if name.startswith("_") or not hasattr(torch.Tensor, name):
            continue
        obj = getattr(torch, name)
        if callable(obj) and not inspect.isclass(obj):
            yield Found(f"torch.{name}", "torch", "function", f"torch.{name}", obj)


def _special() -> Iterator[Found]:
    for name in sorted(dir(torch.special)):
        obj = getattr(torch.special, name)
        if not name.startswith("_") and callable(obj) and not inspect.ismodule(obj):
            yield Found(f"torch.special.{name}", "torch.special", "function", f"torch.special.{name}", obj)


def transformers_modeling_modules(models: int | list[str] | None = None) -> list[str]:
    """Modeling modules of the installed transformers: all, the first N, or the named models."""
    import transformers.models

    names = sorted(info.name for info in pkgutil.iter_modules(transformers.models.__path__))
    if isinstance(models, (list, tuple)):
        names = [name for name in names if name in models]
    elif models is not None:
        names = names[:models]
    return [f"transformers.models.{name}.modeling_{name}" for name in names]


def _transformers(model_limit: int | list[str] | None) -> Iterator[Found]:
    import transformers.activations as activations

    module_names = ["transformers.activations", *transformers_modeling_modules(model_limit)]
    for module_name in module_names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(module_name)
        except Exception:  # a model whose optional dependency is missing: nothing to crawl
            continue
        for name, obj in sorted(vars(module).items()):
            if getattr(obj, "__module__", None) != module.__name__ or name.startswith("_"):
                continue
            if inspect.isclass(obj) and issubclass(obj, nn.Module):
                if module is activations or TRANSFORMERS_CLASS.search(name):
                    yield Found(f"hf.{name}", "transformers", "module", f"{module_name}.{name}", obj)
            elif inspect.isfunction(obj) and TRANSFORMERS_FUNCTION.search(name):
                yield Found(f"hf.{name}", "transformers", "function", f"{module_name}.{name}", obj)


def enumerate_operators(sources=SOURCES, transformers_models: int | list[str] | None = None) -> Iterator[Found]:
    producers = {
        "torch.nn": _torch_nn,
        "torch.nn.functional": _functional,
        "torch": _tensor_math,
        "torch.special": _special,
        "transformers": lambda: _transformers(transformers_models),
    }
    for source in sources:
        yield from producers[source]()


# -- recipes from signatures ---------------------------------------------------------------------


def _required(signature: inspect.Signature, skip: int) -> tuple[list[str], dict[str, object]]:
    """Required parameter names (after `skip` leading ones) and the optional ones' defaults."""
    required, optional = [], {}
    for parameter in list(signature.parameters.values())[skip:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        else:
            optional[parameter.name] = parameter.default
    return required, optional


def _config_recipe(cls: type) -> dict | None:
    """`LlamaMLP(config)`: the config class of the same model, with its hidden size bound to the
    input's last dimension and its intermediate size chosen."""
    module = inspect.getmodule(cls)
    try:
        from transformers import PretrainedConfig
    except ImportError:
        return None
    configs = [
        (name, obj) for name, obj in vars(module).items()
        if inspect.isclass(obj) and issubclass(obj, PretrainedConfig) and obj is not PretrainedConfig
    ]
    if not configs:
        return None
    # The config whose name shares the longest prefix with the class (LlamaMLP -> LlamaConfig).
    name, config_cls = max(configs, key=lambda item: len(_common_prefix(item[0], cls.__name__)))
    try:
        defaults = config_cls()
    except Exception:
        return None
    fields: dict[str, dict] = {}

    def has(attribute: str) -> bool:
        # Some configs (transformers 5.17's per-layer ones) raise other errors than
        # AttributeError for attributes they hold only per layer.
        try:
            return hasattr(defaults, attribute)
        except Exception:
            return False

    if has("hidden_size"):
        fields["hidden_size"] = {"from_dim": -1}
    if has("intermediate_size"):
        fields["intermediate_size"] = {"choice": SIZE_CHOICES}
    # Configs validate that the hidden size splits into the attention heads.
    if has("num_attention_heads"):
        fields["num_attention_heads"] = {"divisor_of_dim": -1, "choice": [2, 4]}
    if has("num_key_value_heads"):
        fields["num_key_value_heads"] = {"value": 1}
    if has("head_dim"):
        fields["head_dim"] = {"value": None}
    return {"config": f"{config_cls.__module__}.{name}", "fields": fields}


def _common_prefix(a: str, b: str) -> str:
    length = 0
    while length < min(len(a), len(b)) and a[length] == b[length]:
        length += 1
    return a[:length]


def _named_recipes(names: list[str], input_dim: int, obj) -> dict[str, dict] | None:
    """Recipes for the required arguments `names`, with the input bound to `input_dim`;
    None when one of them has no recipe."""
    recipes: dict[str, dict] = {}
    input_bound = False
    for name in names:
        if name == "config":
            recipe = _config_recipe(obj) if inspect.isclass(obj) else None
            if recipe is None:
                return None
            recipes[name] = recipe
        elif name in INPUT_NAMES and not input_bound:
            input_bound = True
            key = "from_dim_tuple" if name == "normalized_shape" else "from_dim"
            recipes[name] = {key: input_dim}
        elif name in OUTPUT_NAMES:
            recipes[name] = {"choice": SIZE_CHOICES}
        elif name in DIVISOR_NAMES:
            recipes[name] = {"divisor_of_dim": input_dim, "choice": [2, 4, 8]}
        elif name in NAMED_RECIPES:
            recipes[name] = NAMED_RECIPES[name]
        elif name in TENSOR_NAMES:
            recipes[name] = {"param": "last" if input_dim == -1 else "channel"}
        else:
            return None
    return recipes


def _signature(obj) -> inspect.Signature | None:
    try:
        return inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    except (TypeError, ValueError):
        return None


def candidate_specs(found: Found) -> tuple[list[OperatorSpec], str]:
    """Spec variants to try, most plausible first; or no variant and the reason."""
    base = OperatorSpec(found.name, found.source, found.kind, found.target, normalise(found.name))
    signature = _signature(found.obj)
    variants: list[OperatorSpec] = []
    if found.kind == "module":
        if signature is None:
            return [], "constructor has no readable signature"
        required, optional = _required(signature, skip=1)
        # nn.Softmax(dim=None) picks a dimension by a deprecated rule: say it. nn.Upsample
        # needs one of two optional arguments.
        extra = {"dim": None} if optional.get("dim", 0) is None else {}
        if optional.get("scale_factor", 0) is None:
            required.append("scale_factor")
        channel_first = any("channel" in n or n == "num_features" for n in required)
        for input_dim in ((1, -1) if channel_first else (-1, 1)):
            recipes = _named_recipes(required, input_dim, found.obj)
            if recipes is None:
                missing = [n for n in required if _named_recipes([n], input_dim, found.obj) is None]
                return [], f"no recipe for constructor argument {', '.join(missing)}"
            dims = (input_dim,) if extra else (None,)
            for dim in dims:
                ctor = {**recipes, **({"dim": {"value": dim}} if dim is not None else {})}
                variants.append(replace(base, ctor=ctor))
        return _unique(variants), ""
    if signature is not None:
        required, optional = _required(signature, skip=1)
        dim_kwargs = {"dim": {"value": -1}} if optional.get("dim", 0) is None else {}
        for input_dim in (-1, 1):
            recipes = _named_recipes(required, input_dim, found.obj)
            if recipes is not None:
                variants.append(replace(base, call_args=list(recipes.values()),
                                        call_kwargs=dict(dim_kwargs)))
        if not variants and required:
            return [], f"no recipe for argument {', '.join(required)}"
    if signature is None or not variants:
        variants += [replace(base, call_args=list(a), call_kwargs=dict(k)) for a, k in GENERIC_CALLS]
    return _unique(variants), ""


def _unique(specs: list[OperatorSpec]) -> list[OperatorSpec]:
    seen, unique = set(), []
    for spec in specs:
        key = repr((spec.ctor, spec.call_args, spec.call_kwargs))
        if key not in seen:
            seen.add(key)
            unique.append(spec)
    return unique


# -- trials --------------------------------------------------------------------------------------


def _trial_input(shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to(dtype)


def run_trial(spec: OperatorSpec, rank: int, dtype=torch.float32) -> tuple[OperatorSpec, torch.Tensor, torch.Tensor, nn.Module]:
    """Run the operator once on a small input of `rank`. Returns the spec (with `output_index`
    set when the operator returns a tuple), input, output and the built module."""
    shape = TRIAL_SHAPES[rank]
    try:
        bound = bind(spec, shape, random.Random(0))
    except NotApplicable as error:
        raise TrialFailure("shape does not fit", str(error)) from None
    x = _trial_input(shape, 0, dtype)
    try:
        with _time_limit(TRIAL_TIMEOUT_S), torch.no_grad():
            torch.manual_seed(0)
            module = AppliedOp(bound).to(dtype).eval()
            out = module(x)
    except TrialFailure:
        raise
    except Exception as error:
        raise TrialFailure("fails on a single tensor input", f"{type(error).__name__}: {error}"[:300]) from None
    if isinstance(out, (tuple, list)) and spec.output_index is None:
        if out and isinstance(out[0], torch.Tensor):
            return run_trial(replace(spec, output_index=0), rank, dtype)
        raise TrialFailure("returns a tuple without a tensor first")
    if not isinstance(out, torch.Tensor):
        raise TrialFailure("returns no tensor", type(out).__name__)
    if not out.is_floating_point():
        raise TrialFailure("non-float output", str(out.dtype))
    if out.dim() == 0 or out.shape[0] != shape[0]:
        raise TrialFailure("drops the batch dimension", f"{shape} -> {tuple(out.shape)}")
    if not bool(torch.isfinite(out).all()):
        raise TrialFailure("NaN or Inf on standard normal inputs")
    with torch.no_grad():
        other = module(_trial_input(shape, 1, dtype))  # AppliedOp already took output_index
    if tuple(other.shape) != tuple(out.shape):
        raise TrialFailure("data-dependent output shape")
    try:
        meta_shape = propagate(bound, dtype)
    except Exception as error:
        raise TrialFailure("no meta kernel (shape cannot be propagated)", f"{type(error).__name__}: {error}"[:300]) from None
    if meta_shape != tuple(out.shape):
        raise TrialFailure("meta shape differs from the real one", f"{meta_shape} vs {tuple(out.shape)}")
    return spec, x, out, module


def _shape_rule(shapes: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> str:
    rules = set()
    for before, after in shapes:
        if before == after:
            rules.add("same")
        elif len(after) < len(before):
            rules.add("reduce")
        elif len(after) > len(before):
            rules.add("expand")
        elif before[:-1] == after[:-1]:
            rules.add("last_dim")
        elif before[:1] + before[2:] == after[:1] + after[2:]:
            rules.add("channel")
        else:
            rules.add("general")
    return rules.pop() if len(rules) == 1 else "general"


def try_operator(found: Found) -> tuple[OperatorSpec | None, CrawlRecord]:
    if found.kind == "module" and found.name.split(".")[-1] in CONTAINERS:
        return None, CrawlRecord(found.name, found.source, False, "container")
    if found.name.split(".")[-1].endswith("_"):
        return None, CrawlRecord(found.name, found.source, False, "in-place variant")
    if found.name.endswith("Loss") or found.name.endswith("_loss"):
        return None, CrawlRecord(found.name, found.source, False, "loss: needs a target tensor")
    if is_stochastic(found.name):
        return None, CrawlRecord(found.name, found.source, False, "stochastic")
    try:
        variants, why_none = candidate_specs(found)
    except Exception as error:  # an installed library's quirk must not stop the whole crawl
        return None, CrawlRecord(found.name, found.source, False, f"recipe error: {type(error).__name__}")
    if not variants:
        return None, CrawlRecord(found.name, found.source, False, why_none)
    best: tuple[OperatorSpec, list] | None = None
    failures: collections.Counter = collections.Counter()
    details: dict[str, str] = {}
    for variant in variants:
        passed = []
        for rank in TRIAL_SHAPES:
            try:
                passed.append((rank, *run_trial(variant, rank)))
            except TrialFailure as failure:
                failures[failure.reason] += 1
                details.setdefault(failure.reason, failure.detail)
        if passed and (best is None or len(passed) > len(best[1])):
            best = (variant, passed)
    if best is None:
        reason = failures.most_common(1)[0][0] if failures else "no trial ran"
        return None, CrawlRecord(found.name, found.source, False, reason, details.get(reason, ""))
    return _finish(found, best[1])


def _finish(found: Found, passed: list) -> tuple[OperatorSpec | None, CrawlRecord]:
    # The highest rank: on a rank-2 input nn.Flatten is an identity, on rank 4 it is not.
    rank, spec, x, out, module = passed[-1]
    with torch.no_grad():
        torch.manual_seed(1)
        first = module(x)
        torch.manual_seed(2)
        second = module(x)
    if not torch.equal(first, second):
        return None, CrawlRecord(found.name, found.source, False, "stochastic", "two runs differ")
    if out.shape == x.shape and torch.equal(out, x):
        return None, CrawlRecord(found.name, found.source, False, "identity (computes nothing)")
    if bool((out == out.flatten()[0]).all()):
        return None, CrawlRecord(found.name, found.source, False, "constant output")
    category = "compute"
    if out.numel() == x.numel() and torch.equal(out.flatten().sort().values, x.flatten().sort().values):
        category = "layout"
    dtypes = ["float32"]
    for dtype in (torch.float16, torch.bfloat16):
        try:
            run_trial(spec, rank, dtype)
            dtypes.append(str(dtype).removeprefix("torch."))
        except TrialFailure:
            pass
    spec = replace(
        spec,
        ranks=[entry[0] for entry in passed],
        dtypes=dtypes,
        shape_rule=_shape_rule([(tuple(e[2].shape), tuple(e[3].shape)) for e in passed]),
        category=category,
        has_weights=any(True for _ in module.parameters()),
        imports=_imports(spec),
    )
    return spec, CrawlRecord(found.name, found.source, True, "kept", f"ranks {spec.ranks}")


def _imports(spec: OperatorSpec) -> list[str]:
    modules = [spec.target.rsplit(".", 1)[0]]
    for recipe in spec.ctor.values():
        if "config" in recipe:
            modules.append(recipe["config"].rsplit(".", 1)[0])
    return [m for m in dict.fromkeys(modules) if not m.startswith("torch")]


def _source_hash(obj) -> str | None:
    """Library code is often copied between models under a new name (XRMSNorm = LlamaRMSNorm):
    the same source with the name removed is one operator."""
    try:
        text = inspect.getsource(obj)
    except (OSError, TypeError):
        return None
    text = text.replace(getattr(obj, "__name__", ""), "NAME")
    text = re.sub(r"#.*", "", text)
    return hashlib.sha256(re.sub(r"\s+", " ", text).encode()).hexdigest()


def crawl(
    sources=SOURCES,
    transformers_models: int | list[str] | None = None,
    name_filter: str | None = None,
    progress=None,
) -> Catalogue:
    """Crawl the installed libraries. `name_filter` (a regex on names) restricts the crawl;
    `progress(done, name)` is called after each operator."""
    operators, log = [], []
    if "transformers" in sources and importlib.util.find_spec("transformers") is None:
        # The base install has no transformers (it comes with the train extra): crawl the rest.
        sources = tuple(source for source in sources if source != "transformers")
        log.append(CrawlRecord("transformers", "transformers", False, "not installed",
                               "pip install 'cuda-agent[train]' to crawl transformers' operators"))
    seen_sources: dict[str, str] = {}
    pattern = re.compile(name_filter) if name_filter else None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # trial tensors are tiny: threads only add overhead
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for done, found in enumerate(enumerate_operators(sources, transformers_models), 1):
                if pattern and not pattern.search(found.name):
                    continue
                digest = _source_hash(found.obj) if found.source == "transformers" else None
                if digest and digest in seen_sources:
                    log.append(CrawlRecord(found.name, found.source, False,
                                           "duplicate source", f"same code as {seen_sources[digest]}"))
                    continue
                if digest:
                    seen_sources[digest] = found.name
                spec, record = try_operator(found)
                log.append(record)
                if spec is not None:
                    operators.append(spec)
                if progress:
                    progress(done, found.name)
    finally:
        torch.set_num_threads(threads)
    return Catalogue(operators, log, _versions())


def _versions() -> dict[str, str]:
    versions = {"torch": torch.__version__}
    try:
        import transformers

        versions["transformers"] = transformers.__version__
    except ImportError:
        pass
    return versions


__all__ = ["crawl", "import_target", "SOURCES"]

# SPDX-License-Identifier: Apache-2.0
"""The grammar ``model_new.py`` is written in: an allowlist, checked on its syntax tree in the
trusted process (nothing is imported or run).

Inside the candidate's process the forward guard is only defence in depth: Python code that
reaches the harness's modules or torch's internals can widen it or switch it off, and an
import allowlist is no boundary, since allowed modules hand out others through their
attributes (``typing.sys``, ``torch.nn.modules.module.torch.utils``). So every import, name,
attribute and call of ``model_new.py`` is checked against the tables below, and anything they
do not list is rejected with a finding that names the construct and its line:

* imports: the modules of :data:`MODULE_TABLES` and the contract's extension modules;
* attributes of a module: exactly the members its table lists (no submodule beyond them);
* names: what the file defines itself, and the builtins of :data:`BUILTINS`;
* attributes and methods of values, by what the value is known to be: tensors (creation,
  copies, views, metadata), containers, streams, events, CUDA graphs, ``nn`` modules
  (parameters, buffers, submodules, settings) and the attributes the file assigns itself;
* no dunder names or attributes beyond defining ``__init__`` and ``forward`` and calling
  ``super().__init__()``; no private attributes (but a tensor's ``_version``); no
  reflection (``getattr``, ``setattr``, ``globals``, ``vars``, ``type``, ``exec``, ...);
  no lambdas, nested functions, ``global``, generators or ``try``/``except``; no method
  that overrides one of ``nn.Module``'s (the harness calls those outside ``forward``);
* code that runs while ``forward`` runs (``forward``, every function and method reachable
  from it) may do arithmetic only on values it can be seen to hold Python numbers or shapes
  (literals, ``.shape``, ``.size()``, ``.numel()``, ``.dim()``, constructor arguments, layer
  settings, and the elements of lists, dicts and sets made of those, as long as nothing else
  can get into any of them): tensor arithmetic there is torch compute. A value read back from
  a tensor's data may be named and handed to the extension, nothing else. Code that runs
  only while ``ModelNew`` is built (its ``__init__`` and what only ``__init__`` calls) may
  also build weights and constant buffers with the torch functions of
  :data:`TORCH_CONSTRUCTION`: no input exists yet, and the reference's weights replace the
  parameters afterwards.

Values are followed by a small flow-insensitive inference over the whole file (what each
name, attribute of ``self``, parameter and return value may hold), iterated to a fixpoint,
so that aliases (``t = torch``), helpers and ``self`` attributes are judged by what they hold.
Modules, functions and classes are second-class: they may be named, called, aliased to a
plain name or passed to a function of the file, but never hidden in a container or handed to
code the grammar cannot follow.

Later forms widen the contract through :class:`Contract`: the extension's module names,
torch operator namespaces the candidate registers itself (``torch.ops.<namespace>.<op>``),
and, where marked below, the single-file ``load_inline`` form."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .findings import Findings

# -- values --------------------------------------------------------------------------------
# What an expression may hold is a set of atoms. First-class atoms are data; the others
# (prefixed) are modules, callables and classes, which must stay where the grammar sees them.

TENSOR = "tensor"
INPUT = "input"          # an argument of ModelNew.forward: a tensor or a value of get_inputs()
NUMBER = "number"        # a Python number, bool or other scalar
READ_BACK = "read-back"  # a number read back from a tensor's data (.item(), float(t)): data, never arithmetic
SHAPE = "shape"          # a tuple of Python numbers (torch.Size among them)
ARG = "argument"         # a constructor argument (a value of get_init_inputs())
STRING = "string"
NONE = "none"
DTYPE = "dtype"
DEVICE = "device"
METADATA = "metadata"    # finfo, iinfo, layouts, memory formats, device properties
CONTAINER = "container"  # a list, tuple, dict or set of anything
NUMBERS = "numbers"      # a list, dict or set of Python numbers and shapes (see _Grammar.numbers)
STREAM = "stream"
EVENT = "event"
GRAPH = "graph"
CONTEXT = "context"      # a context manager: no_grad(), torch.cuda.stream(s), ...
DECORATOR = "decorator"
EXCEPTION = "exception"
UNKNOWN = "unknown"      # a value the inference cannot name (an extension's result, ...)
SUPER = "super"
SUPER_INIT = "super-init"
REPORTED = "reported"    # part of an expression already rejected: no further findings
NN_METHOD = "nn-method"  # marks an nn.Module method among an attribute's values
FILE_METHOD = "file-method"  # marks a method of the file's classes called on an unknown value

#: Values arithmetic in forward may use: the grammar sees they hold no tensor.
PROVABLE = frozenset({NUMBER, SHAPE, ARG, STRING, NONE, DTYPE, DEVICE, METADATA, NUMBERS})

MODULE = "module:"       # module:<dotted path>
MEMBER = "member:"       # member:<module path>.<name>, a function or class of a module table
BUILTIN = "builtin:"     # builtin:<name>
FUNCTION = "function:"   # function:<qualified name>, a function or method of the file
CLASS = "class:"         # class:<name>, a class of the file
OBJECT = "object:"       # object:<class>, an instance of a class of the file (self)
LAYER = "layer:"         # layer:<nn class name>, or layer:? for an element of an nn container
EXTENSION = "extension:"  # extension:<module>.<name>
OPERATOR = "operator:"   # operator:torch.ops.<namespace>.<op>[.<overload>]

SECOND_CLASS = (MODULE, MEMBER, BUILTIN, FUNCTION, CLASS)
#: Builtin types that are data where they are passed (torch.ones(n, dtype=bool)).
DATA_BUILTINS = frozenset(BUILTIN + name for name in ("int", "float", "bool", "complex"))

# -- the tables ------------------------------------------------------------------------------

ANYWHERE = "anywhere"
CONSTRUCTION = "construction"   # only in code that runs while ModelNew is built


@dataclass(frozen=True)
class Member:
    """One name a module table allows. ``kind``: "module" (a submodule, ``target``), "value"
    (a constant), "call" (a function), "class" (callable, and usable in isinstance, bases
    and annotations), "decorator", "annotation" (typing names, only in annotations).
    ``result``: the atoms a call (or the value) gives; ``where``: the calls' place."""

    kind: str
    result: frozenset = frozenset()
    where: str = ANYWHERE
    target: str = ""


def _members(names: str, kind: str, *result: str, where: str = ANYWHERE) -> dict[str, Member]:
    return {name: Member(kind, frozenset(result), where) for name in names.split()}


def _module(target: str) -> Member:
    return Member("module", target=target)


_DTYPES = ("float32 float float16 half bfloat16 float64 double int8 int16 short int32 int int64 long uint8 uint16"
           " uint32 uint64 bool complex64 cfloat complex128 cdouble float8_e4m3fn float8_e5m2")

#: torch: tensor creation, views, metadata, dtypes, and the submodules below.
TORCH_MEMBERS: dict[str, Member] = {
    "nn": _module("torch.nn"), "cuda": _module("torch.cuda"),
    **_members("empty empty_like empty_strided zeros zeros_like ones ones_like full full_like arange tensor"
               " as_tensor scalar_tensor", "call", TENSOR),
    **_members("reshape flatten unflatten transpose permute squeeze unsqueeze narrow select movedim t"
               " as_strided view_as_real view_as_complex", "call", TENSOR),
    **_members("split chunk unbind", "call", CONTAINER),
    **_members("is_tensor is_floating_point is_complex numel", "call", NUMBER),
    **_members("get_default_dtype", "call", DTYPE),
    **_members("finfo iinfo", "class", METADATA),
    "Size": Member("class", frozenset({SHAPE})), "device": Member("class", frozenset({DEVICE})),
    "dtype": Member("class", frozenset({DTYPE})), "Tensor": Member("class", frozenset({TENSOR})),
    **_members("no_grad inference_mode", "class", CONTEXT),
    **_members(_DTYPES, "value", DTYPE),
    **_members("strided sparse_coo channels_last channels_last_3d contiguous_format preserve_format", "value",
               METADATA),
}

#: torch functions code that runs while ModelNew is built may call (weights and constant
#: buffers: random initialization, masks, tables). None of them may run in forward.
TORCH_CONSTRUCTION: dict[str, Member] = _members(
    "randn rand randint randperm randn_like rand_like randint_like normal bernoulli tril triu eye linspace"
    " logspace stack cat concat concatenate hstack vstack where exp log log2 log10 log1p sqrt rsqrt sin cos tan"
    " tanh sigmoid abs sign pow clamp clip floor ceil round outer cumsum cumprod sum mean prod amax amin max min"
    " matmul mm bmm einsum polar complex flip roll repeat_interleave diag diag_embed kron meshgrid",
    "call", TENSOR, where=CONSTRUCTION)

#: torch names that are outside the contract for what they do, not for what they compute:
#: compilation, tracing, global settings, profilers and harness utilities.
TORCH_GLOBAL = frozenset({
    "compile", "jit", "fx", "export", "library", "backends", "utils", "autograd", "profiler", "testing",
    "multiprocessing", "distributed", "overrides", "hub", "onnx", "compiler", "package", "serialization",
    "set_num_threads", "set_num_interop_threads", "set_default_dtype", "set_default_device",
    "set_float32_matmul_precision", "set_flush_denormal", "use_deterministic_algorithms", "manual_seed", "seed",
    "set_rng_state", "set_printoptions", "set_grad_enabled", "set_anomaly_enabled", "set_warn_always",
})

#: nn layer classes: built while ModelNew is built (they hold the reference's parameters);
#: calling one runs torch's computation.
NN_LAYERS = frozenset("""
    AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveLogSoftmaxWithLoss AdaptiveMaxPool1d
    AdaptiveMaxPool2d AdaptiveMaxPool3d AlphaDropout AvgPool1d AvgPool2d AvgPool3d BCELoss BCEWithLogitsLoss
    BatchNorm1d BatchNorm2d BatchNorm3d Bilinear CELU CTCLoss ChannelShuffle CircularPad1d CircularPad2d
    CircularPad3d ConstantPad1d ConstantPad2d ConstantPad3d Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d
    ConvTranspose3d CosineEmbeddingLoss CosineSimilarity CrossEntropyLoss CrossMapLRN2d Dropout Dropout1d
    Dropout2d Dropout3d ELU Embedding EmbeddingBag FeatureAlphaDropout Flatten Fold FractionalMaxPool2d
    FractionalMaxPool3d GELU GLU GRU GRUCell GaussianNLLLoss GroupNorm Hardshrink Hardsigmoid Hardswish Hardtanh
    HingeEmbeddingLoss HuberLoss Identity InstanceNorm1d InstanceNorm2d InstanceNorm3d KLDivLoss L1Loss LPPool1d
    LPPool2d LPPool3d LSTM LSTMCell LayerNorm LeakyReLU Linear LocalResponseNorm LogSigmoid LogSoftmax MSELoss
    MarginRankingLoss MaxPool1d MaxPool2d MaxPool3d MaxUnpool1d MaxUnpool2d MaxUnpool3d Mish MultiLabelMarginLoss
    MultiLabelSoftMarginLoss MultiMarginLoss MultiheadAttention NLLLoss PReLU PairwiseDistance PixelShuffle
    PixelUnshuffle PoissonNLLLoss RMSNorm RNN RNNCell RReLU ReLU ReLU6 ReflectionPad1d ReflectionPad2d
    ReflectionPad3d ReplicationPad1d ReplicationPad2d ReplicationPad3d SELU SiLU Sigmoid SmoothL1Loss
    SoftMarginLoss Softmax Softmax2d Softmin Softplus Softshrink Softsign Tanh Tanhshrink Threshold Transformer
    TransformerDecoder TransformerDecoderLayer TransformerEncoder TransformerEncoderLayer TripletMarginLoss
    TripletMarginWithDistanceLoss Unflatten Unfold Upsample UpsamplingBilinear2d UpsamplingNearest2d ZeroPad1d
    ZeroPad2d ZeroPad3d
""".split())
NN_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})

#: torch.nn: modules and their containers, parameters and buffers, layers, initialization.
NN_MEMBERS: dict[str, Member] = {
    "Module": Member("class", frozenset({LAYER + "Module"})),
    **{name: Member("class", frozenset({LAYER + name})) for name in NN_CONTAINERS},
    **_members("Parameter Buffer", "class", TENSOR),
    **{name: Member("class", frozenset({LAYER + name}), CONSTRUCTION) for name in NN_LAYERS},
    "init": _module("torch.nn.init"), "functional": _module("torch.nn.functional"),
}
NN_INIT_MEMBERS: dict[str, Member] = {
    **_members("constant_ dirac_ eye_ kaiming_normal_ kaiming_uniform_ normal_ ones_ orthogonal_ sparse_"
               " trunc_normal_ uniform_ xavier_normal_ xavier_uniform_ zeros_", "call", TENSOR, where=CONSTRUCTION),
    "calculate_gain": Member("call", frozenset({NUMBER}), CONSTRUCTION),
}

#: torch.cuda: streams, events, CUDA graphs and device queries.
CUDA_MEMBERS: dict[str, Member] = {
    **_members("Stream ExternalStream", "class", STREAM), "Event": Member("class", frozenset({EVENT})),
    "CUDAGraph": Member("class", frozenset({GRAPH})),
    **_members("current_stream default_stream", "call", STREAM),
    **_members("stream graph device", "class", CONTEXT),
    **_members("synchronize", "call", NONE),
    **_members("graph_pool_handle get_device_properties", "call", METADATA),
    **_members("is_available current_device device_count is_current_stream_capturing", "call", NUMBER),
    **_members("get_device_capability", "call", SHAPE), **_members("get_device_name", "call", STRING),
}

_MATH_FUNCTIONS = ("acos acosh asin asinh atan atan2 atanh cbrt ceil comb copysign cos cosh degrees dist erf erfc"
                   " exp exp2 expm1 fabs factorial floor fmod frexp fsum gamma gcd hypot isclose isfinite isinf"
                   " isnan isqrt lcm ldexp lgamma log log10 log1p log2 modf nextafter perm pow prod radians"
                   " remainder sin sinh sqrt tan tanh trunc ulp")

#: Every module model_new.py may import (besides the contract's extension modules), with
#: the members it may use. A module absent here cannot be imported; a member absent from
#: its table cannot be used.
MODULE_TABLES: dict[str, dict[str, Member]] = {
    "torch": TORCH_MEMBERS | TORCH_CONSTRUCTION,
    "torch.nn": NN_MEMBERS,
    "torch.nn.init": NN_INIT_MEMBERS,
    "torch.nn.functional": {},
    "torch.cuda": CUDA_MEMBERS,
    "math": {**_members(_MATH_FUNCTIONS, "call", NUMBER), **_members("pi e tau inf nan", "value", NUMBER)},
    "typing": _members("Any Optional Union List Tuple Dict Set FrozenSet Sequence Iterable Mapping Callable",
                       "annotation"),
    "functools": {"lru_cache": Member("call", frozenset({DECORATOR})), "cache": Member("decorator")},
    "collections": {"OrderedDict": Member("class", frozenset({CONTAINER}))},
    "itertools": _members("product chain repeat", "call", CONTAINER),
    "__future__": _members("annotations", "value", NONE),
}
#: What each module is for, for the messages.
MODULE_PURPOSE = {
    "torch": "tensor creation and metadata (empty, empty_like, zeros, full, arange, dtypes, ...), torch.nn and"
             " torch.cuda",
    "torch.nn": "Module, Parameter, Buffer, the containers (Sequential, ModuleList, ModuleDict, ...), the layer"
                " classes (to hold parameters) and torch.nn.init",
    "torch.cuda": "streams, events, CUDA graphs and device queries",
    "torch.nn.init": "the initialization functions, inside __init__",
}

# -- attributes of values ----------------------------------------------------------------------

#: Tensor attributes that are not methods.
TENSOR_PROPERTIES = {
    "shape": SHAPE, "dtype": DTYPE, "device": DEVICE, "layout": METADATA, "ndim": NUMBER, "T": TENSOR,
    "mT": TENSOR, "H": TENSOR, "mH": TENSOR, "data": TENSOR, "is_cuda": NUMBER, "is_cpu": NUMBER,
    "requires_grad": NUMBER, "itemsize": NUMBER, "nbytes": NUMBER,
    # A parameter's version counter: the key of a cache that must notice new weights.
    "_version": NUMBER,
}
#: Tensor methods anywhere: metadata, creation, copies (in place too) and views.
TENSOR_METHODS = {
    **{name: NUMBER for name in "dim numel nelement element_size data_ptr storage_offset get_device is_contiguous"
                                " is_floating_point is_complex is_pinned".split()},
    # A value of the tensor's data: it may be handed to the extension (a bound kept in a
    # buffer), never computed on in Python.
    "item": READ_BACK,
    "size": SHAPE, "stride": SHAPE,
    **{name: TENSOR for name in "contiguous view view_as reshape reshape_as to cpu cuda float double half bfloat16"
                                " int long short bool byte char clone detach detach_ copy_ fill_ zero_ new_empty"
                                " new_empty_strided new_zeros new_ones new_full new_tensor expand expand_as"
                                " permute t transpose unsqueeze squeeze flatten unflatten narrow select diagonal"
                                " movedim as_strided unfold requires_grad_".split()},
    **{name: CONTAINER for name in "split chunk unbind".split()},
    "record_stream": NONE,
}
#: Tensor methods code that builds ModelNew may call besides (to prepare weights and buffers).
TENSOR_CONSTRUCTION_METHODS = {name: TENSOR for name in """
    add add_ sub sub_ mul mul_ div div_ neg neg_ abs exp log sqrt rsqrt pow sum mean max min amax amin clamp
    clamp_ clip masked_fill masked_fill_ uniform_ normal_ fill_diagonal_ tril triu tril_ triu_ matmul mm bmm
    cumsum flip repeat repeat_interleave roll sign sin cos tanh sigmoid softmax argsort sort topk index_select
    gather scatter scatter_ eq ne lt le gt ge logical_not logical_and logical_or any all float_power
""".split()}
SHAPE_METHODS = {"numel": NUMBER, "index": NUMBER, "count": NUMBER}
#: Methods of a list, dict or set of numbers: those that add elements take numbers only
#: (anything else makes every such container an ordinary one, _Grammar.escape_numbers).
NUMBERS_METHODS = {
    **{name: NONE for name in "append extend insert clear update add remove discard".split()},
    **{name: NUMBER for name in "pop get setdefault index count".split()},
    **{name: NUMBERS for name in "keys values copy".split()},
    "items": CONTAINER,
}
NUMBERS_FILLING = frozenset({"append", "extend", "insert", "update", "add", "setdefault"})
#: Builtins that read a list, dict or set of numbers without keeping or changing it.
NUMBERS_READERS = frozenset("""
    len int float bool round abs min max sum divmod pow all any isinstance str print tuple list dict set frozenset
    enumerate zip reversed sorted
""".split())
STRING_METHODS = {"join": STRING, "startswith": NUMBER, "endswith": NUMBER}
CONTAINER_METHODS = {
    **{name: NONE for name in "append extend insert clear update".split()},
    **{name: UNKNOWN for name in "pop get setdefault".split()},
    **{name: CONTAINER for name in "items keys values copy".split()},
    "index": NUMBER, "count": NUMBER,
}
STREAM_MEMBERS = {"wait_stream": NONE, "wait_event": NONE, "synchronize": NONE, "record_event": EVENT,
                  "query": NUMBER}
STREAM_PROPERTIES = {"cuda_stream": NUMBER, "device": DEVICE, "priority": NUMBER}
EVENT_MEMBERS = {"record": NONE, "wait": NONE, "synchronize": NONE, "query": NUMBER}
GRAPH_MEMBERS = {"capture_begin": NONE, "capture_end": NONE, "replay": NONE, "reset": NONE, "pool": METADATA}
#: Attributes of dtypes, devices, finfo/iinfo and device properties.
METADATA_PROPERTIES = frozenset("""
    type index is_floating_point is_complex is_signed itemsize bits eps max min tiny smallest_normal resolution
    name major minor multi_processor_count total_memory warp_size max_threads_per_multi_processor
""".split())

#: nn.Module members a candidate may use on its modules.
NN_MODULE_METHODS = {
    **{name: CONTAINER for name in "parameters named_parameters buffers named_buffers children named_children"
                                   " modules named_modules".split()},
    **{name: NONE for name in "register_buffer register_parameter register_module add_module".split()},
}
NN_MODULE_PROPERTIES = {"training": NUMBER}
#: Methods of the nn containers (ModuleList, Sequential, ModuleDict, ParameterList, ...).
NN_CONTAINER_METHODS = {
    **{name: NONE for name in "append extend insert update".split()},
    **{name: CONTAINER for name in "items keys values".split()},
}
#: Attributes of nn layers: their parameters and buffers, their submodules, their settings.
NN_LAYER_TENSORS = frozenset("""
    weight bias running_mean running_var num_batches_tracked in_proj_weight in_proj_bias q_proj_weight
    k_proj_weight v_proj_weight bias_k bias_v weight_ih weight_hh bias_ih bias_hh
""".split())
NN_LAYER_PARAMETER = re.compile(r"(weight|bias)_(ih|hh|hr)_l\d+(_reverse)?")
NN_LAYER_SUBMODULES = frozenset("""
    out_proj self_attn multihead_attn linear1 linear2 norm1 norm2 norm3 dropout1 dropout2 dropout3 layers encoder
    decoder norm
""".split())
NN_LAYER_SETTINGS = frozenset("""
    in_features out_features in1_features in2_features in_channels out_channels kernel_size stride padding
    dilation groups output_padding padding_mode eps momentum affine track_running_stats num_features num_groups
    num_channels normalized_shape elementwise_affine negative_slope inplace p dim min_val max_val lambd alpha
    beta threshold value upscale_factor downscale_factor scale_factor mode align_corners size num_embeddings
    embedding_dim padding_idx max_norm norm_type scale_grad_by_freq sparse input_size hidden_size num_layers
    nonlinearity batch_first dropout bidirectional proj_size embed_dim num_heads head_dim kdim vdim ceil_mode
    count_include_pad return_indices output_size start_dim end_dim approximate divisor_override
    unflattened_size
""".split())

#: Every member of nn.Module (torch 2.11, dunders aside): a class may not define a method or
#: assign an attribute of these names, since the harness calls them (to, train,
#: load_state_dict, state_dict, ...) outside forward, and torch calls the private ones.
NN_MODULE_MEMBERS = frozenset("""
    T_destination _apply _backward_hooks _backward_pre_hooks _buffers _call_impl _compiled_call_impl
    _forward_hooks _forward_hooks_always_called _forward_hooks_with_kwargs _forward_pre_hooks
    _forward_pre_hooks_with_kwargs _get_backward_hooks _get_backward_pre_hooks _get_name _is_full_backward_hook
    _load_from_state_dict _load_state_dict_post_hooks _load_state_dict_pre_hooks _maybe_warn_non_full_backward_hook
    _modules _named_members _non_persistent_buffers_set _parameters _register_load_state_dict_pre_hook
    _register_state_dict_hook _replicate_for_data_parallel _save_to_state_dict _slow_forward _state_dict_hooks
    _state_dict_pre_hooks _version _wrapped_call_impl add_module apply bfloat16 buffers call_super_init children
    compile cpu cuda double dump_patches eval extra_repr float forward get_buffer get_extra_state get_parameter
    get_submodule half ipu load_state_dict modules mtia named_buffers named_children named_modules
    named_parameters parameters register_backward_hook register_buffer register_forward_hook
    register_forward_pre_hook register_full_backward_hook register_full_backward_pre_hook
    register_load_state_dict_post_hook register_load_state_dict_pre_hook register_module register_parameter
    register_state_dict_post_hook register_state_dict_pre_hook requires_grad_ set_extra_state set_submodule
    share_memory state_dict to to_empty train training type xpu zero_grad
""".split())

# -- builtins --------------------------------------------------------------------------------------

#: Builtins model_new.py may use, with what a call gives.
BUILTINS = {
    **{name: NUMBER for name in "len int float bool round abs min max sum divmod pow all any isinstance".split()},
    "str": STRING, "print": NONE, "super": SUPER,
    **{name: CONTAINER for name in "tuple list dict set frozenset range enumerate zip reversed sorted".split()},
    **{name: EXCEPTION for name in "Exception ValueError TypeError RuntimeError NotImplementedError AssertionError"
                                   " KeyError IndexError ImportError AttributeError ZeroDivisionError".split()},
    "object": UNKNOWN,
}
#: Builtins that read the values of their argument's elements (their truth, order, hash or
#: text): in forward, only of Python numbers and shapes.
DATA_READING_BUILTINS = {"any": "takes the truth of", "all": "takes the truth of", "sorted": "orders",
                         "set": "hashes", "frozenset": "hashes", "str": "formats"}
#: Builtins that compute on their arguments: in forward, only on Python numbers and shapes.
ARITHMETIC_BUILTINS = frozenset({"round", "abs", "min", "max", "sum", "divmod", "pow"})
#: Builtins that turn a value into a Python number: of a tensor, in forward, they read its
#: data back to the host (as .item() does), which lets code sniff its inputs and branch.
NUMBER_CONVERSIONS = frozenset({"int", "float", "bool", "complex"})
#: Builtins that reach attributes by computed names, or objects' types and namespaces.
REFLECTION_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr", "vars", "dir", "type", "id",
                                 "issubclass", "callable", "classmethod", "staticmethod", "property"})
#: Builtins that run code from strings, reach the interpreter, or leave the process.
FORBIDDEN_BUILTINS = frozenset({"exec", "eval", "compile", "globals", "locals", "open", "input", "breakpoint",
                                "memoryview", "help", "exit", "quit", "__import__"})
ANNOTATION_BUILTINS = frozenset({"int", "float", "bool", "str", "tuple", "list", "dict", "set", "frozenset",
                                 "object", "bytes", "complex"})

#: torch operator namespaces torch owns: a contract cannot open them to the candidate.
TORCH_OPERATOR_NAMESPACES = frozenset({"aten", "prims", "prim", "higher_order", "inductor", "profiler", "quantized",
                                       "_quantized", "mkldnn", "c10d", "_c10d_functional", "_dtensor", "debugprims",
                                       "rngprims", "cuda", "_inductor_test", "fbgemm", "torchvision"})


@dataclass(frozen=True)
class Contract:
    """What the candidate's form adds to the grammar.

    ``extension_modules``: the names its extension is imported under; any public function of
    them may be called anywhere.

    ``torch_operator_namespaces``: namespaces of torch operators the candidate registers itself
    (``TORCH_LIBRARY(myext, m)`` in its C++). With ``{"myext"}``, ``torch.ops.myext.<op>`` and
    ``torch.ops.myext.<op>.<overload>`` may be called anywhere; the forward guard must then allow
    the same operators (its ``extra_allowed``). torch's own namespaces (``aten``, ``prims``,
    ...) cannot be opened."""

    extension_modules: frozenset = frozenset({"cuda_extension"})
    torch_operator_namespaces: frozenset = frozenset()

    def __post_init__(self):
        owned = set(self.torch_operator_namespaces) & TORCH_OPERATOR_NAMESPACES
        if owned:
            raise ValueError(f"torch operator namespaces owned by torch cannot be opened: {sorted(owned)}")

    def module_table(self, path: str) -> dict[str, Member] | None:
        if path == "torch" and self.torch_operator_namespaces:
            return MODULE_TABLES["torch"] | {"ops": _module("torch.ops")}
        if path == "torch.ops" and self.torch_operator_namespaces:
            return {namespace: _module(f"torch.ops.{namespace}") for namespace in self.torch_operator_namespaces}
        return MODULE_TABLES.get(path)

    def importable(self, path: str) -> bool:
        return path in MODULE_TABLES or path in self.extension_modules


DEFAULT_CONTRACT = Contract()

# -- the checker ---------------------------------------------------------------------------------

FORWARD = "forward"        # code that runs while forward runs (or that the grammar cannot place)
BUILDING = "building"      # code that runs only while ModelNew is built, or at import


def _structure_atoms(structure: list) -> set[str]:
    """Every atom of a per-position structure (sets of atoms, or nested structures)."""
    return set().union(*(_structure_atoms(part) if isinstance(part, list) else part for part in structure))


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _shown(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # a node unparse does not know
        text = type(node).__name__
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _listing(names, limit: int = 14) -> str:
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (", ..." if len(names) > limit else "")


@dataclass
class _Function:
    qualified: str
    node: ast.FunctionDef
    owner: str | None                   # the class of a method
    parameters: list[str] = field(default_factory=list)
    star_parameters: set[str] = field(default_factory=set)
    local_names: set[str] = field(default_factory=set)
    context: str = FORWARD


@dataclass
class _Class:
    name: str
    node: ast.ClassDef
    bases: list[str] = field(default_factory=list)       # local base classes
    methods: dict[str, str] = field(default_factory=dict)
    body_names: set[str] = field(default_factory=set)


class _Grammar:
    """Checks one file; see the module's docstring."""

    def __init__(self, tree: ast.Module, findings: Findings, contract: Contract):
        self.tree = tree
        self.findings = findings
        self.contract = contract
        self.report = False
        self.changed = False
        self.seen: set[tuple[int, str]] = set()
        self.functions: dict[str, _Function] = {}
        self.classes: dict[str, _Class] = {}
        self.module_env: dict[str, set[str]] = {}
        self.local_env: dict[str, dict[str, set[str]]] = {}
        self.returns: dict[str, set[str]] = {}
        self.call_arguments: dict[str, dict[str, set[str]]] = {}
        #: The parameters some call passes, by function.
        self.passed: dict[str, set[str]] = {}
        self.defaults: dict[str, dict[str, set[str]]] = {}
        self.attributes: dict[str, dict[str, set[str]]] = {}
        self.edges: dict[str, set[str]] = {}
        self.escaped: set[str] = set()
        self.declared_keys: set[str] = set()
        self.function: _Function | None = None
        self.annotation = False
        #: Whether parameters of functions nothing calls hold unknown values yet: off at first,
        #: so that values still on their way along the calls are not mistaken for unknown ones.
        self.uncalled_unknown = False
        #: Whether some list, dict or set of numbers may hold something else (see numbers()).
        self.numbers_escaped = False

    # -- driving -------------------------------------------------------------------------------
    def check(self) -> None:
        self.collect()
        self.settle()
        self.uncalled_unknown = True
        self.settle()
        self.place_functions()
        self.report = True
        escaped = self.numbers_escaped
        self.evaluate_all()
        if self.numbers_escaped != escaped:
            # Values unknown until the report filled a container of numbers: judge the file
            # again with every such container an ordinary one.
            self.evaluate_all()

    def settle(self) -> None:
        """Evaluates the file until what every name may hold stops growing. Until the report,
        a value not known yet is the empty set; the report pass sees the settled values."""
        for _ in range(40):
            self.changed = False
            self.evaluate_all()
            if not self.changed:
                return

    def missing(self) -> set[str]:
        """What a value nothing was learnt about holds: nothing yet while settling, unknown in
        the report."""
        return {UNKNOWN} if self.report else set()

    def numbers(self) -> set[str]:
        """What a list, dict or set displayed with Python numbers and shapes only holds.

        Elements read from it count as numbers as long as nothing else can get into it: the
        flow-insensitive inference cannot tell one list from another, so every store of
        anything else into such a container, and every way out of the grammar's sight (into
        an ordinary container, an extension's or an unknown object's call, an attribute of
        something other than the file's objects), makes all of them ordinary containers,
        whose elements may be tensors."""
        return {NUMBERS, CONTAINER} if self.numbers_escaped else {NUMBERS}

    def escape_numbers(self, atoms) -> None:
        """``atoms`` go where a list, dict or set of numbers may be changed out of sight."""
        if NUMBERS in atoms and not self.numbers_escaped:
            self.numbers_escaped = True
            self.changed = True

    def fill_numbers(self, container, atoms) -> None:
        """``atoms`` are stored into ``container``: only numbers keep it a container of numbers."""
        if NUMBERS in container and not self.provable(atoms, empty=True):
            self.escape_numbers(container)

    def evaluate_all(self) -> None:
        self.function = None
        for statement in self.tree.body:
            self.module_statement(statement)
        for qualified in list(self.functions):
            self.run_function(qualified)

    def find(self, reason: str, node, rule: str, message: str) -> None:
        if not self.report:
            return
        line = getattr(node, "lineno", 0)
        if (line, rule) in self.seen:
            return
        self.seen.add((line, rule))
        self.findings.add(reason, node, message, rule)

    @property
    def context(self) -> str:
        return self.function.context if self.function else BUILDING

    @property
    def in_forward(self) -> bool:
        # Functions are placed only once the values settled; until then everything is evaluated
        # as construction code, whose results are the most informative.
        return self.report and self.context == FORWARD

    def caller(self) -> str:
        return self.function.qualified if self.function else "<module>"

    def merge(self, table: dict, key: str, atoms) -> None:
        current = table.setdefault(key, set())
        new = set(atoms) - current
        if new:
            current |= new
            self.changed = True

    # -- collecting the file's definitions ----------------------------------------------------
    def collect(self) -> None:
        for statement in self.tree.body:
            if isinstance(statement, ast.FunctionDef):
                self.add_function(statement, None)
            elif isinstance(statement, ast.ClassDef):
                info = _Class(statement.name, statement)
                for base in statement.bases:
                    if isinstance(base, ast.Name) and base.id in self.classes:
                        info.bases.append(base.id)
                self.classes[statement.name] = info
                for item in statement.body:
                    if isinstance(item, ast.FunctionDef):
                        info.methods[item.name] = self.add_function(item, statement.name)
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        info.body_names |= {t.id for t in targets if isinstance(t, ast.Name)}
        for node in ast.walk(self.tree):
            self.collect_declared_keys(node)

    def is_module_class(self, name: str, visiting: set[str] | None = None) -> bool:
        """Whether a class of the file derives from torch.nn.Module, by what its bases hold."""
        visiting = visiting if visiting is not None else set()
        info = self.classes.get(name)
        if info is None or name in visiting:
            return False
        visiting.add(name)
        for base in info.node.bases:
            atoms = self.expr_quiet(base)
            if MEMBER + "torch.nn.Module" in atoms:
                return True
            if any(atom.startswith(CLASS) and self.is_module_class(atom[len(CLASS):], visiting) for atom in atoms):
                return True
        return False

    def add_function(self, node: ast.FunctionDef, owner: str | None) -> str:
        qualified = f"{owner}.{node.name}" if owner else node.name
        arguments = node.args
        parameters = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
        stars = {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
        info = _Function(qualified, node, owner, parameters, stars)
        info.local_names = set(parameters) | stars | self.bound_in(node)
        self.functions[qualified] = info
        return qualified

    @staticmethod
    def bound_in(function: ast.FunctionDef) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(function):
            if node is function:
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        return names

    def collect_declared_keys(self, node) -> None:
        """Names the file gives submodules and buffers through strings and keywords: keys of
        dicts, keywords of dict() and the nn containers, names passed to register_buffer."""
        if isinstance(node, ast.Dict):
            self.declared_keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and
                                   isinstance(k.value, str) and k.value.isidentifier()}
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("dict", "ModuleDict", "ParameterDict", "OrderedDict"):
                self.declared_keys |= {k.arg for k in node.keywords if k.arg}
            if name in ("OrderedDict", "ModuleDict", "ParameterDict", "Sequential"):
                for argument in node.args:
                    for element in getattr(argument, "elts", []):
                        first = element.elts[0] if isinstance(element, ast.Tuple) and element.elts else None
                        if isinstance(first, ast.Constant) and isinstance(first.value, str):
                            self.declared_keys.add(first.value)
            if name in ("register_buffer", "register_parameter", "register_module", "add_module") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    self.declared_keys.add(first.value)

    # -- where each function runs -----------------------------------------------------------------
    def place_functions(self) -> None:
        """Code reachable from a forward (or not placed at all) is checked as forward; code
        reachable only from the module's top level and ModelNew.__init__ as construction."""
        def reach(roots):
            seen, stack = set(), list(roots)
            while stack:
                current = stack.pop()
                if current in seen:
                    continue
                seen.add(current)
                stack.extend(self.edges.get(current, ()))
            return seen
        forward_roots = {q for q, f in self.functions.items() if f.owner and f.node.name == "forward"}
        forward = reach(forward_roots | self.escaped)
        building = reach({"<module>", "ModelNew.__init__"})
        for qualified, info in self.functions.items():
            info.context = BUILDING if qualified in building and qualified not in forward else FORWARD

    # -- module level ---------------------------------------------------------------------------
    def module_statement(self, node) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.import_statement(node)
        elif isinstance(node, ast.FunctionDef):
            self.define_function(node, None)
        elif isinstance(node, ast.ClassDef):
            self.define_class(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Pass, ast.Raise, ast.Assert)):
            # The single-file form (``cuda_extension = torch.utils.cpp_extension.load_inline(
            # name=..., cpp_sources=..., cuda_sources=..., functions=[...])``) would be accepted
            # here: a module-level assignment that binds one of the contract's extension modules
            # from a load_inline call whose sources are string literals. Until a contract
            # enables it, torch.utils is outside the grammar like any other module attribute.
            self.statement(node)
        else:
            self.find("forbidden_construct", node, "module-level",
                      f"a module-level {type(node).__name__.lower()} statement is not part of the grammar:"
                      " model_new.py holds imports, constants, functions and classes; put code in ModelNew.")

    def import_statement(self, node) -> None:
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                self.find("forbidden_module", node, "import",
                          "relative imports are not allowed: the candidate is model_new.py and its extension only.")
                return
            if not self.contract.importable(module):
                self.forbidden_import(node, module)
                for alias in node.names:
                    self.bind(alias.asname or alias.name, {REPORTED})
                return
            for alias in node.names:
                if alias.name == "*":
                    self.find("forbidden_construct", node, "import",
                              f"'from {module} import *' hides what is used; import the names you use.")
                    continue
                # Importing a typing name is fine; using it outside annotations is not.
                annotation, self.annotation = self.annotation, True
                try:
                    atoms = self.module_attribute(MODULE + module, alias.name, node)
                finally:
                    self.annotation = annotation
                self.bind(alias.asname or alias.name, atoms or {REPORTED})
            return
        for alias in node.names:
            if not self.contract.importable(alias.name):
                self.forbidden_import(node, alias.name)
                self.bind((alias.asname or alias.name).split(".")[0], {REPORTED})
            elif alias.asname:
                self.bind(alias.asname, {MODULE + alias.name})
            else:
                self.bind(alias.name.split(".")[0], {MODULE + alias.name.split(".")[0]})

    def forbidden_import(self, node, name: str) -> None:
        allowed = sorted(set(MODULE_TABLES) - {"__future__"} | set(self.contract.extension_modules))
        self.find("forbidden_module", node, "import",
                  f"imports {name}; model_new.py may import only {', '.join(allowed)}.")

    def define_function(self, node: ast.FunctionDef, owner: str | None) -> None:
        qualified = f"{owner}.{node.name}" if owner else node.name
        if _is_dunder(node.name) and not (owner and node.name == "__init__"):
            if node.name == "__del__":
                self.find("forbidden_construct", node, "finalizer",
                          "__del__ runs code at unpredictable times; remove it.")
            else:
                self.find("forbidden_construct", node, "dunder",
                          f"defines {node.name}: the only special method a class may define is __init__.")
        elif owner and node.name in NN_MODULE_MEMBERS and node.name != "forward" and self.is_module_class(owner):
            self.find("forbidden_construct", node, "reserved",
                      f"{owner}.{node.name} overrides nn.Module.{node.name}, which the evaluation and torch call"
                      " outside forward; give the method another name.")
        for decorator in node.decorator_list:
            self.decorator(decorator)
        arguments = node.args
        positional = arguments.posonlyargs + arguments.args
        defaults = self.defaults.setdefault(qualified, {})
        # Defaults go to parameters, which the inference follows like any other name.
        for argument, default in zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults):
            self.merge(defaults, argument.arg, self.expr(default))
        for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
            if default is not None:
                self.merge(defaults, argument.arg, self.expr(default))
        for argument in positional + arguments.kwonlyargs + [arguments.vararg, arguments.kwarg]:
            if argument is not None and argument.annotation is not None:
                self.annotate(argument.annotation)
        if node.returns is not None:
            self.annotate(node.returns)

    def decorator(self, node) -> None:
        atoms = self.expr(node)
        allowed = {DECORATOR, CONTEXT, REPORTED}
        decorators = {MEMBER + "functools.cache", MEMBER + "torch.no_grad", MEMBER + "torch.inference_mode"}
        if not atoms or not all(atom in allowed or atom in decorators for atom in atoms):
            self.find("forbidden_construct", node, "decorator",
                      f"decorator @{_shown(node)} is not part of the grammar; functions may be decorated with"
                      " functools.lru_cache, functools.cache, torch.no_grad() or torch.inference_mode() only.")

    def define_class(self, node: ast.ClassDef) -> None:
        is_module = self.is_module_class(node.name)
        if _is_dunder(node.name):
            self.find("forbidden_construct", node, "dunder", f"class {node.name} has a dunder name; rename it.")
        for decorator in node.decorator_list:
            self.find("forbidden_construct", decorator, "decorator",
                      f"class {node.name} is decorated (@{_shown(decorator)}); classes take no decorators.")
        for keyword in node.keywords:
            self.find("forbidden_construct", node, "class-base",
                      f"class {node.name} passes {keyword.arg}= to its class statement; define plain classes.")
        for base in node.bases:
            self.class_base(node, base)
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                self.define_function(item, node.name)
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                for target in targets:
                    if not isinstance(target, ast.Name) or _is_dunder(target.id) or \
                            (is_module and target.id in NN_MODULE_MEMBERS):
                        self.find("forbidden_construct", item, "class-body",
                                  f"class {node.name} assigns {_shown(target)} in its body; class attributes must"
                                  " be plain names that are not nn.Module's.")
                if isinstance(item, ast.AnnAssign):
                    self.annotate(item.annotation)
                if item.value is not None:
                    atoms = self.value(item.value)
                    for target in targets:
                        if isinstance(target, ast.Name):
                            self.merge(self.attributes.setdefault(node.name, {}), target.id, atoms)
            elif isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant):
                continue
            elif isinstance(item, ast.Pass):
                continue
            else:
                self.find("forbidden_construct", item, "class-body",
                          f"a {type(item).__name__.lower()} statement in the body of class {node.name} is not part"
                          " of the grammar; classes hold methods, a docstring and constants.")

    def class_base(self, node: ast.ClassDef, base) -> None:
        if isinstance(base, ast.Name) and base.id == "Model" and base.id not in self.module_env:
            self.find("forbidden_construct", node, "delegation",
                      f"class {node.name} inherits from the reference Model; implement ModelNew itself.")
            return
        atoms = self.expr(base)
        if atoms & {MEMBER + "torch.Tensor"} or _shown(base).endswith(("TensorBase", "_TensorBase")):
            self.find("forbidden_construct", node, "tensor-subclass",
                      f"class {node.name} subclasses torch.Tensor; outputs must be plain tensors.")
            return
        allowed = {MEMBER + "torch.nn.Module", BUILTIN + "object", REPORTED} | {CLASS + name for name in self.classes}
        if not atoms or not atoms <= allowed:
            self.find("forbidden_construct", node, "class-base",
                      f"class {node.name} derives from {_shown(base)}; classes derive from torch.nn.Module or from"
                      " classes of model_new.py only.")

    # -- functions --------------------------------------------------------------------------------
    def run_function(self, qualified: str) -> None:
        info = self.functions[qualified]
        self.function = info
        env = self.local_env.setdefault(qualified, {})
        defaults = self.defaults.get(qualified, {})
        received = self.call_arguments.get(qualified, {})
        for index, name in enumerate(info.parameters):
            if info.owner and index == 0:
                atoms = {OBJECT + info.owner}
            elif qualified == "ModelNew.__init__":
                atoms = {ARG} | received.get(name, set())
            elif qualified == "ModelNew.forward":
                atoms = {INPUT} | received.get(name, set())
            elif name in self.passed.get(qualified, ()):
                atoms = received.get(name) or self.missing()
            elif qualified in self.call_arguments and name in defaults:
                atoms = set()  # no call passes it: it holds its default
            else:
                atoms = {UNKNOWN} if self.uncalled_unknown else set()
            self.merge(env, name, atoms | defaults.get(name, set()))
        for name in info.star_parameters:
            self.merge(env, name, {CONTAINER})
        for statement in info.node.body:
            self.statement(statement)
        self.function = None

    def bind(self, name: str, atoms) -> None:
        if _is_dunder(name):
            return
        if self.function is not None and name in self.function.local_names:
            self.merge(self.local_env.setdefault(self.function.qualified, {}), name, atoms)
        else:
            self.merge(self.module_env, name, atoms)

    # -- statements --------------------------------------------------------------------------------
    def statement(self, node) -> None:
        handler = getattr(self, "statement_" + type(node).__name__, None)
        if handler is None:
            self.find("forbidden_construct", node, "statement",
                      f"a {type(node).__name__} statement is not part of the grammar of model_new.py.")
            return
        handler(node)

    def statements(self, body) -> None:
        for node in body:
            self.statement(node)

    def statement_Expr(self, node) -> None:
        if isinstance(node.value, ast.Constant):
            return
        self.expr(node.value)

    def statement_Pass(self, node) -> None:
        return

    statement_Break = statement_Continue = statement_Pass

    def statement_Assign(self, node) -> None:
        if len(node.targets) == 1 and isinstance(node.value, (ast.Tuple, ast.List)) and \
                isinstance(node.targets[0], (ast.Tuple, ast.List)) and \
                len(node.value.elts) == len(node.targets[0].elts) and \
                not any(isinstance(e, ast.Starred) for e in node.value.elts + node.targets[0].elts):
            # a, b = c, d: pairs of assignments; no container is made.
            for target, value in zip(node.targets[0].elts, node.value.elts):
                tracked = self.tracks_second_class(target)
                self.assign(target, self.expr(value) if tracked else self.value(value), self.structure(value))
            return
        tracked = all(self.tracks_second_class(target) for target in node.targets)
        atoms = self.expr(node.value) if tracked else self.value(node.value)
        structure = self.structure(node.value)
        for target in node.targets:
            self.assign(target, atoms, structure)

    def statement_AnnAssign(self, node) -> None:
        self.annotate(node.annotation)
        if node.value is not None:
            atoms = self.expr(node.value) if self.tracks_second_class(node.target) else self.value(node.value)
            self.assign(node.target, atoms, self.structure(node.value))

    def statement_AugAssign(self, node) -> None:
        current = self.value(node.target)
        operand = self.value(node.value)
        self.fill_numbers(current, operand)  # list += ... extends in place
        result = self.arithmetic(node, current, operand, _shown(node))
        self.assign(node.target, result, None)

    def statement_Return(self, node) -> None:
        atoms = self.expr(node.value) if node.value is not None else {NONE}
        if self.function is not None:
            self.merge(self.returns, self.function.qualified, atoms)

    def branch_test(self, test) -> None:
        """A condition: in forward, one on a value read back from a tensor computes on it,
        and one on a tensor reads its value back (bool(t))."""
        atoms = self.value(test)
        if not self.in_forward:
            return
        if READ_BACK in atoms:
            self.read_back_arithmetic(test, _shown(test))
        elif TENSOR in atoms:
            self.tensor_truth(test, _shown(test))

    def tensor_truth(self, node, shown: str, what: str = "takes the truth of") -> None:
        self.find("forbidden_operation", node, "read-back-arithmetic",
                  f"{shown} {what} a value that may be a tensor, inside code that runs in forward: that reads its"
                  " data back to Python to branch on it. Branch on Python numbers and shapes only; decide on the"
                  " data in your kernels.")

    def read_back_use(self, node, how: str) -> None:
        self.find("forbidden_operation", node, "read-back-use",
                  f"{_shown(node)} {how} a value read back from a tensor's data (.item(), or int(), float(), bool()"
                  " of a tensor), inside code that runs in forward: such a value may only be handed to your"
                  " extension, directly or through a name. Do the computation, and any decision on the data, in your"
                  " kernels.")

    def statement_If(self, node) -> None:
        self.branch_test(node.test)
        self.statements(node.body)
        self.statements(node.orelse)

    def statement_While(self, node) -> None:
        self.branch_test(node.test)
        self.statements(node.body)
        self.statements(node.orelse)

    def statement_For(self, node) -> None:
        atoms, structure = self.iteration(node.iter)
        self.assign(node.target, atoms, structure)
        self.statements(node.body)
        self.statements(node.orelse)

    def statement_With(self, node) -> None:
        for item in node.items:
            atoms = self.value(item.context_expr)
            if atoms and not atoms <= {CONTEXT, STREAM, REPORTED}:
                self.find("forbidden_construct", item.context_expr, "with",
                          f"with {_shown(item.context_expr)}: the only context managers are torch.no_grad(),"
                          " torch.inference_mode(), torch.cuda.stream(...), torch.cuda.graph(...) and"
                          " torch.cuda.device(...).")
            if item.optional_vars is not None:
                self.assign(item.optional_vars, atoms - {CONTEXT} or {UNKNOWN}, None)
        self.statements(node.body)

    def statement_Raise(self, node) -> None:
        if node.exc is not None:
            atoms = self.expr(node.exc)
            if not atoms <= {EXCEPTION, REPORTED} | {BUILTIN + n for n, r in BUILTINS.items() if r == EXCEPTION}:
                self.find("forbidden_construct", node, "raise",
                          f"raises {_shown(node.exc)}; raise a builtin exception (ValueError, RuntimeError, ...).")
        if node.cause is not None:
            self.value(node.cause)

    def statement_Assert(self, node) -> None:
        self.branch_test(node.test)
        if node.msg is not None:
            self.value(node.msg)

    def statement_Delete(self, node) -> None:
        for target in node.targets:
            if isinstance(target, ast.Attribute):
                self.check_attribute_target(target)
            elif isinstance(target, ast.Subscript):
                self.value(target.value)
                self.value(target.slice)

    def statement_Try(self, node) -> None:
        if node.handlers:
            self.find("forbidden_construct", node, "try-except",
                      "try/except can hide a failing kernel behind a fallback; let errors propagate.")
        self.statements(node.body)
        for handler in node.handlers:
            self.statements(handler.body)
        self.statements(node.orelse)
        self.statements(node.finalbody)

    statement_TryStar = statement_Try

    def statement_Import(self, node) -> None:
        self.import_statement(node)

    statement_ImportFrom = statement_Import

    def statement_Global(self, node) -> None:
        self.find("forbidden_construct", node, "global-state",
                  f"'{type(node).__name__.lower()} {', '.join(node.names)}' changes state outside the function;"
                  " keep state on self.")

    statement_Nonlocal = statement_Global

    def statement_FunctionDef(self, node) -> None:
        self.find("forbidden_construct", node, "closure",
                  f"defines {node.name} inside a function: nested functions and closures hide code the checks cannot"
                  " place; define it at module level or as a method.")

    statement_AsyncFunctionDef = statement_ClassDef = statement_FunctionDef

    # -- assignment ----------------------------------------------------------------------------------
    @staticmethod
    def tracks_second_class(target) -> bool:
        """Targets that keep what they hold in view: plain names and attributes of self."""
        if isinstance(target, ast.Name):
            return True
        return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)

    def structure(self, node):
        if isinstance(node, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return [self.expr_quiet(element) for element in node.elts]
        return None

    def expr_quiet(self, node) -> set[str]:
        report, self.report = self.report, False
        try:
            return self.expr(node)
        finally:
            self.report = report

    def assign(self, target, atoms, structure) -> None:
        if isinstance(target, ast.Name):
            if _is_dunder(target.id):
                self.find("forbidden_construct", target, "dunder",
                          f"assigns the dunder name {target.id}; use another name.")
            self.bind(target.id, atoms)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for index, element in enumerate(target.elts):
                if isinstance(element, ast.Starred):
                    self.assign(element.value, {CONTAINER}, None)
                elif structure is not None and len(structure) == len(target.elts):
                    part = structure[index]
                    if isinstance(part, list):  # a nested position: for i, (a, b) in enumerate(zip(...))
                        self.assign(element, _structure_atoms(part), part)
                    else:
                        self.assign(element, part, None)
                else:
                    self.assign(element, self.element(atoms), None)
        elif isinstance(target, ast.Attribute):
            self.assign_attribute(target, atoms)
        elif isinstance(target, ast.Subscript):
            base = self.value(target.value)
            self.value(target.slice)
            self.fill_numbers(base, atoms)
            if base & {ARG, SHAPE}:
                self.find("forbidden_construct", target, "assignment",
                          f"assigns into {_shown(target.value)}, which holds constructor arguments or a shape (values"
                          " the checks count as Python numbers); copy it first, for example list(...).")
        elif isinstance(target, ast.Starred):
            self.assign(target.value, {CONTAINER}, None)
        else:
            self.find("forbidden_construct", target, "assignment",
                      f"assigns to {_shown(target)}, which is not part of the grammar.")

    def root_atoms(self, node) -> set[str]:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return self.expr_quiet(node) if isinstance(node, ast.Name) else set()

    def check_attribute_target(self, target: ast.Attribute) -> set[str] | None:
        """The atoms of the object whose attribute is set (None when rejected)."""
        root = self.root_atoms(target)
        if any(atom.startswith((MODULE, MEMBER, CLASS, BUILTIN, EXTENSION)) for atom in root):
            self.find("forbidden_construct", target, "monkeypatch",
                      f"assigns to {_shown(target)}: replacing functions or settings of modules is not allowed.")
            return None
        base = self.value(target.value)
        if _is_dunder(target.attr):
            self.find("forbidden_construct", target, "dunder",
                      f"assigns {_shown(target)}: dunder attributes belong to the interpreter.")
            return None
        for atom in sorted(base - {REPORTED, NONE}):
            if atom.startswith((OBJECT, LAYER)) or atom == UNKNOWN:
                if target.attr in NN_MODULE_MEMBERS and atom != UNKNOWN:
                    self.find("forbidden_construct", target, "reserved",
                              f"assigns {_shown(target)}: {target.attr} belongs to nn.Module (the evaluation and torch"
                              " rely on it); use another name.")
                    return None
                if atom.startswith(OBJECT) or target.attr in NN_LAYER_TENSORS or \
                        target.attr in self.declared_keys or \
                        any(target.attr in names for names in self.attributes.values()):
                    continue
            if atom in (TENSOR, INPUT, UNKNOWN) and target.attr == "requires_grad":
                continue
            self.find("forbidden_construct", target, "attribute",
                      f"assigns {_shown(target)}: attributes may be set on self and the file's own objects, and"
                      " parameters on nn layers, only.")
            return None
        return base

    def assign_attribute(self, target: ast.Attribute, atoms) -> None:
        base = self.check_attribute_target(target)
        if base is None:
            return
        if any(not atom.startswith(OBJECT) for atom in base):
            self.escape_numbers(atoms)
        for atom in sorted(base):
            if atom.startswith(OBJECT):
                self.merge(self.attributes.setdefault(atom[len(OBJECT):], {}), target.attr, atoms)

    # -- expressions -------------------------------------------------------------------------------
    def value(self, node) -> set[str]:
        """An expression whose value goes where the grammar no longer follows it."""
        atoms = self.expr(node)
        second = {a for a in atoms if a.startswith(SECOND_CLASS) and a not in DATA_BUILTINS}
        if second:
            self.second_class(node, second)
            return (atoms - second) | {REPORTED}
        return atoms

    def second_class(self, node, atoms) -> None:
        for atom in sorted(atoms):
            if atom.startswith((FUNCTION,)):
                self.escaped.add(atom[len(FUNCTION):])
        kinds = {MODULE: "module", MEMBER: "function or class", BUILTIN: "builtin", FUNCTION: "function",
                 CLASS: "class"}
        named = sorted(f"{kinds[atom.split(':', 1)[0] + ':']} {atom.split(':', 1)[1]}" for atom in atoms)
        self.find("forbidden_construct", node, "value",
                  f"{_shown(node)}: uses the {', the '.join(named)} as a value (in a container, an argument, an"
                  " index or an operation); modules, functions and classes may only be named, called, or aliased to"
                  " a plain name.")

    def expr(self, node) -> set[str]:
        handler = getattr(self, "expr_" + type(node).__name__, None)
        if handler is None:
            self.find("forbidden_construct", node, "expression",
                      f"{_shown(node)}: a {type(node).__name__} expression is not part of the grammar.")
            return {REPORTED}
        return handler(node)

    def expr_Constant(self, node) -> set[str]:
        if node.value is None:
            return {NONE}
        if isinstance(node.value, (str, bytes)):
            return {STRING}
        return {NUMBER}

    def expr_Name(self, node) -> set[str]:
        name = node.id
        if _is_dunder(name):
            self.find("forbidden_construct", node, "dunder",
                      f"uses {name}: dunder names reach the interpreter's internals.")
            return {REPORTED}
        if self.function is not None and name in self.function.local_names:
            return set(self.local_env.get(self.function.qualified, {}).get(name, ())) or self.missing()
        if name in self.module_env or name in self.classes or (name in self.functions and
                                                                 self.functions[name].owner is None):
            atoms = set(self.module_env.get(name, ()))
            if name in self.classes:
                atoms.add(CLASS + name)
            if name in self.functions:
                atoms.add(FUNCTION + name)
            return atoms or self.missing()
        if name in BUILTINS or (self.annotation and name in ANNOTATION_BUILTINS):
            return {BUILTIN + name}
        if name in REFLECTION_BUILTINS:
            self.find("forbidden_construct", node, "reflection",
                      f"{name} reaches attributes or types by reflection; name attributes directly.")
        elif name in FORBIDDEN_BUILTINS:
            self.find("forbidden_construct", node, "builtin",
                      f"{name} runs code from strings, opens files or reaches the interpreter's internals.")
        else:
            self.find("forbidden_construct", node, "name",
                      f"{name} is neither defined in model_new.py nor an allowed builtin ({_listing(BUILTINS)}).")
        return {REPORTED}

    def expr_Attribute(self, node) -> set[str]:
        if node.attr == "__init__" and isinstance(node.value, ast.Call) and _shown(node.value.func) == "super":
            atoms = self.expr(node.value)
            return {SUPER_INIT} if SUPER in atoms else {REPORTED}
        base = self.expr(node.value)
        if REPORTED in base:
            return {REPORTED}
        if _is_dunder(node.attr):
            self.find("forbidden_construct", node, "introspection",
                      f"{_shown(node)}: .{node.attr} reaches the interpreter's or the harness's internals.")
            return {REPORTED}
        results: set[str] = set()
        for atom in sorted(base):
            if atom == NONE and len(base) > 1:
                continue
            found = self.attribute(atom, node.attr, node, called=False)
            if found is None:
                return {REPORTED}
            results |= found
        return results

    def expr_Call(self, node) -> set[str]:
        if self.annotation:
            self.find("forbidden_construct", node, "annotation",
                      f"{_shown(node)}: annotations may not call anything.")
            return {REPORTED}
        if isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and node.args and \
                node.func.id not in self.module_env and any(
                    atom.startswith((MODULE, MEMBER, CLASS)) for atom in self.root_atoms(node.args[0])):
            self.find("forbidden_construct", node, "monkeypatch",
                      f"{node.func.id}() on {_shown(node.args[0])} replaces functions or settings of a module.")
            return {REPORTED}
        if isinstance(node.func, ast.Attribute) and not (node.func.attr == "__init__"):
            base = self.expr(node.func.value)
            if REPORTED in base:
                self.arguments(node)
                return {REPORTED}
            if _is_dunder(node.func.attr):
                self.find("forbidden_construct", node.func, "introspection",
                          f"{_shown(node.func)}: .{node.func.attr} reaches the interpreter's or the harness's"
                          " internals.")
                return {REPORTED}
            results: set[str] = set()
            for atom in sorted(base):
                if atom == NONE and len(base) > 1:
                    continue
                found = self.attribute(atom, node.func.attr, node.func, called=True, call=node)
                if found is None:
                    self.arguments(node)
                    return {REPORTED}
                results |= found
            return results
        function = self.expr(node.func)
        if REPORTED in function:
            self.arguments(node)
            return {REPORTED}
        results = set()
        for atom in sorted(function):
            found = self.call(atom, node)
            if found is None:
                return {REPORTED}
            results |= found
        return results

    def expr_Subscript(self, node) -> set[str]:
        if self.annotation:
            self.expr(node.value)
            self.expr(node.slice)
            return {UNKNOWN}
        base = self.value(node.value)
        index, bounds = self.index_atoms(node.slice)
        is_slice = isinstance(node.slice, ast.Slice) or (isinstance(node.slice, ast.Tuple) and any(
            isinstance(e, ast.Slice) for e in node.slice.elts))
        if self.in_forward and REPORTED not in index | bounds:
            if READ_BACK in index | bounds:
                # A table indexed by the data is a computation on it (a lookup table); a slice
                # as long as a value of the data hands that value back as its length.
                self.read_back_use(node, "bounds a slice with" if READ_BACK in bounds else "indexes with")
                return {REPORTED}
            if bounds & {TENSOR, INPUT}:
                self.tensor_truth(node, _shown(node), "bounds a slice with")
                return {REPORTED}
            if index & {TENSOR, INPUT} and base and not base & {TENSOR, INPUT, UNKNOWN, REPORTED} and not any(
                    atom.startswith(LAYER) for atom in base):
                # A Python sequence indexed by a tensor reads its value back (__index__).
                self.tensor_truth(node, _shown(node), "indexes a Python value with")
                return {REPORTED}
        results: set[str] = set()
        for atom in sorted(base):
            if atom == SHAPE:
                results.add(SHAPE if is_slice else NUMBER)
            elif atom == NUMBERS:
                results |= self.numbers() if is_slice else {NUMBER}
            elif atom in (ARG, STRING, REPORTED):
                results.add(atom)
            elif atom in (TENSOR, INPUT):
                results.add(TENSOR)
            elif atom.startswith(LAYER):
                kind = atom[len(LAYER):]
                results.add(TENSOR if kind in ("ParameterList", "ParameterDict") else
                            (LAYER + "?" if kind in NN_CONTAINERS or kind == "?" else UNKNOWN))
            elif atom == NONE:
                continue
            else:
                results.add(UNKNOWN)
        return results or (self.missing() if not base else {UNKNOWN})

    def index_atoms(self, node) -> tuple[set[str], set[str]]:
        """What a subscript's index holds: (its plain indices, its slices' bounds)."""
        if isinstance(node, ast.Tuple):
            index: set[str] = set()
            bounds: set[str] = set()
            for element in node.elts:
                more_index, more_bounds = self.index_atoms(element)
                index, bounds = index | more_index, bounds | more_bounds
            return index, bounds
        if isinstance(node, ast.Slice):
            bounds = set()
            for part in (node.lower, node.upper, node.step):
                if part is not None:
                    bounds |= self.value(part)
            return set(), bounds
        return self.value(node), set()

    def expr_Slice(self, node) -> set[str]:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                self.value(part)
        return {NUMBER}

    def expr_Starred(self, node) -> set[str]:
        return self.value(node.value)

    def expr_Tuple(self, node) -> set[str]:
        atoms: set[str] = set()
        for element in node.elts:
            atoms |= self.expr(element) if self.annotation else self.value(element)
        if self.annotation:
            return {UNKNOWN}
        if self.stores_read_back(node, atoms):
            return {REPORTED}
        if isinstance(node, (ast.List, ast.Set)):
            # A list can change after the inference saw it: one of numbers while it keeps only
            # numbers (an empty one is an ordinary container: it is there to be filled). While
            # settling, elements not known yet decide nothing: an attribute read before the
            # pass that assigns it holds nothing yet, not something unknown.
            if node.elts and not atoms and not self.report:
                return set()
            if node.elts and self.provable(atoms):
                return self.numbers()
            self.escape_numbers(atoms)
            return {CONTAINER}
        if self.provable(atoms, empty=True):
            return {SHAPE}
        self.escape_numbers(atoms)
        return {CONTAINER}

    expr_List = expr_Set = expr_Tuple

    def expr_Dict(self, node) -> set[str]:
        atoms: set[str] = set()
        for key, item in zip(node.keys, node.values):
            if key is not None:
                atoms |= self.value(key)
            atoms |= self.value(item)
        if self.stores_read_back(node, atoms):
            return {REPORTED}
        if node.keys and not atoms and not self.report:
            return set()
        if node.keys and None not in node.keys and self.provable(atoms):
            return self.numbers()
        self.escape_numbers(atoms)
        return {CONTAINER}

    def stores_read_back(self, node, atoms) -> bool:
        """In forward, a container may not hold values read back from tensors: what reads its
        elements (sorted(), in, a lookup) would compute on the data. Reported when it would."""
        if self.in_forward and READ_BACK in atoms:
            self.read_back_use(node, "puts into a container")
            return True
        return False

    def comprehension(self, node) -> None:
        for generator in node.generators:
            if generator.is_async:
                self.find("forbidden_construct", node, "statement", "async comprehensions are not part of the"
                                                                     " grammar.")
            atoms, structure = self.iteration(generator.iter)
            self.assign(generator.target, atoms, structure)
            for condition in generator.ifs:
                self.value(condition)

    def expr_ListComp(self, node) -> set[str]:
        self.comprehension(node)
        atoms = self.value(node.elt)
        if self.stores_read_back(node, atoms):
            return {REPORTED}
        if self.provable(atoms):
            return {SHAPE} if isinstance(node, ast.GeneratorExp) else self.numbers()
        self.escape_numbers(atoms)
        return {CONTAINER}

    expr_SetComp = expr_GeneratorExp = expr_ListComp

    def expr_DictComp(self, node) -> set[str]:
        self.comprehension(node)
        atoms = self.value(node.key) | self.value(node.value)
        if self.stores_read_back(node, atoms):
            return {REPORTED}
        if self.provable(atoms):
            return self.numbers()
        self.escape_numbers(atoms)
        return {CONTAINER}

    def expr_JoinedStr(self, node) -> set[str]:
        formatted: set[str] = set()
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                formatted |= self.value(part.value)
                if part.format_spec is not None:
                    self.expr(part.format_spec)
        if self.in_forward and not self.provable(formatted, empty=True):
            # Text made of a tensor's data is its data: float() of it would be a number.
            self.read_back_use(node, "formats")
            return {REPORTED}
        return {STRING}

    def expr_NamedExpr(self, node) -> set[str]:
        atoms = self.value(node.value)
        self.assign(node.target, atoms, None)
        return atoms

    def expr_IfExp(self, node) -> set[str]:
        self.branch_test(node.test)
        return self.expr(node.body) | self.expr(node.orelse)

    def expr_BoolOp(self, node) -> set[str]:
        atoms: set[str] = set()
        for index, operand in enumerate(node.values):
            found = self.value(operand)
            if self.in_forward and index < len(node.values) - 1 and found & {READ_BACK, TENSOR}:
                # and/or take the truth of every operand but the last one.
                (self.read_back_arithmetic if READ_BACK in found else self.tensor_truth)(operand, _shown(operand))
                return {REPORTED}
            atoms |= found
        return atoms

    def expr_BinOp(self, node) -> set[str]:
        if self.annotation and isinstance(node.op, ast.BitOr):
            self.expr(node.left)
            self.expr(node.right)
            return {UNKNOWN}
        return self.arithmetic(node, self.value(node.left), self.value(node.right), _shown(node))

    def expr_UnaryOp(self, node) -> set[str]:
        operand = self.value(node.operand)
        if self.in_forward and READ_BACK in operand:
            self.read_back_arithmetic(node, _shown(node))
            return {REPORTED}
        if isinstance(node.op, ast.Not):
            if self.in_forward and TENSOR in operand:
                self.tensor_truth(node, _shown(node))
                return {REPORTED}
            return {NUMBER}
        if not operand:
            return set()
        if self.in_forward and not self.provable(operand):
            self.tensor_arithmetic(node, _shown(node))
            return {REPORTED}
        return operand if self.provable(operand) else {TENSOR}

    def expr_Compare(self, node) -> set[str]:
        operands = [self.value(node.left)] + [self.value(c) for c in node.comparators]
        if not self.in_forward:
            return {NUMBER}
        for index, operator in enumerate(node.ops):
            left, right = operands[index], operands[index + 1]
            if isinstance(operator, (ast.Is, ast.IsNot)):
                # Identity decides nothing about a value but against None: `v is k` over the
                # small integers Python keeps once is an equality test on data read back.
                sides = (node.left if index == 0 else node.comparators[index - 1], node.comparators[index])
                if READ_BACK not in left | right or any(
                        isinstance(side, ast.Constant) and side.value is None for side in sides):
                    continue
            if isinstance(operator, (ast.In, ast.NotIn)):
                if self.provable(left) and right <= (PROVABLE | {CONTAINER, REPORTED}):
                    continue
            elif self.provable(left) and self.provable(right):
                continue
            if READ_BACK in left | right:
                self.read_back_arithmetic(node, _shown(node))
            else:
                self.tensor_arithmetic(node, _shown(node), comparison=True)
            return {REPORTED}
        return {NUMBER}

    def expr_Lambda(self, node) -> set[str]:
        self.find("forbidden_construct", node, "lambda",
                  "a lambda hides a function the checks cannot place; define a method of ModelNew or a module-level"
                  " function.")
        return {REPORTED}

    def expr_Await(self, node) -> set[str]:
        self.find("forbidden_construct", node, "statement",
                  f"{_shown(node)}: generators and coroutines are not part of the grammar.")
        return {REPORTED}

    expr_Yield = expr_YieldFrom = expr_Await

    # -- arithmetic -------------------------------------------------------------------------------
    @staticmethod
    def provable(atoms, empty: bool = False) -> bool:
        if not atoms:
            return empty
        return all(atom in PROVABLE or atom == REPORTED for atom in atoms)

    def arithmetic(self, node, left, right, shown: str) -> set[str]:
        if REPORTED in left or REPORTED in right:
            return {REPORTED}
        if not left or not right:
            return set()
        if self.provable(left) and self.provable(right):
            atoms = left | right
            if NUMBERS in atoms and isinstance(getattr(node, "op", None), (ast.Add, ast.Mult)):
                # Joining or repeating lists of numbers makes a new one; a number results only
                # where both sides may be numbers.
                scalars = {NUMBER, ARG}
                return self.numbers() | ({NUMBER} if left & scalars and right & scalars else set())
            result = {NUMBER}
            for kind in (SHAPE, ARG, STRING):
                if kind in atoms:
                    result.add(kind)
            return result
        if isinstance(getattr(node, "op", None), (ast.Add, ast.Mult)) and CONTAINER in left | right and \
                (left | right) <= PROVABLE | {CONTAINER}:
            return {CONTAINER}  # joining or repeating lists and tuples
        if self.in_forward:
            if READ_BACK in left | right:
                self.read_back_arithmetic(node, shown)
            else:
                self.tensor_arithmetic(node, shown)
            return {REPORTED}
        return {TENSOR}

    def read_back_arithmetic(self, node, shown: str) -> None:
        self.find("forbidden_operation", node, "read-back-arithmetic",
                  f"{shown} computes in Python on a value read back from a tensor's data (.item(), or int(),"
                  " float(), bool() of a tensor), inside code that runs in forward: such a value may only be"
                  " handed to your extension. Do the computation, and any decision on the data, in your kernels.")

    def tensor_arithmetic(self, node, shown: str, comparison: bool = False) -> None:
        what = "compares" if comparison else "computes"
        self.find("forbidden_operation", node, "tensor-arithmetic",
                  f"{shown} {what} on a value that may be a tensor, inside code that runs in forward: there,"
                  " arithmetic may use only Python numbers and shapes (literals, .shape, .size(), .numel(), .dim(),"
                  " constructor arguments). Do tensor arithmetic in your kernels.")

    # -- iteration ------------------------------------------------------------------------------------
    def element(self, atoms) -> set[str]:
        if not atoms:
            return self.missing()
        elements: set[str] = set()
        for atom in sorted(atoms):
            if atom in (SHAPE, NUMBERS):
                elements.add(NUMBER)
            elif atom in (ARG, STRING, REPORTED):
                elements.add(atom)
            elif atom in (TENSOR, INPUT):
                elements.add(TENSOR)
            elif atom.startswith(LAYER):
                kind = atom[len(LAYER):]
                elements.add(TENSOR if kind in ("ParameterList",) else
                             (LAYER + "?" if kind in NN_CONTAINERS or kind == "?" else UNKNOWN))
            elif atom == NONE:
                continue
            else:
                elements.add(UNKNOWN)
        return elements or {UNKNOWN}

    def iteration(self, node):
        """What a loop over ``node`` binds: atoms for any target, and a per-position structure
        for enumerate() and zip()."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILTINS and \
                not node.keywords and self.expr_quiet(node.func) == {BUILTIN + node.func.id}:
            name = node.func.id
            if name == "range":
                bounds = set().union(*(self.value(argument) for argument in node.args)) if node.args else set()
                if self.in_forward and READ_BACK in bounds:
                    # A loop as long as a value of the data branches on it.
                    self.read_back_arithmetic(node, _shown(node))
                elif self.in_forward and TENSOR in bounds:
                    self.tensor_truth(node, _shown(node), "counts a loop with")
                return {NUMBER}, None
            if name == "enumerate" and node.args:
                inner, inner_structure = self.iteration(node.args[0])  # enumerate(zip(...)) keeps zip's
                for argument in node.args[1:]:
                    self.value(argument)
                return {NUMBER} | inner, [{NUMBER}, inner_structure if inner_structure is not None else inner]
            if name == "zip":
                parts = [self.element(self.value(argument)) for argument in node.args]
                return set().union(*parts) if parts else {UNKNOWN}, parts
            if name in ("reversed", "sorted", "list", "tuple") and len(node.args) == 1:
                return self.element(self.value(node.args[0])), None
        return self.element(self.value(node)), None

    # -- attributes --------------------------------------------------------------------------------------
    def attribute(self, atom: str, name: str, node, called: bool, call: ast.Call | None = None) -> set[str] | None:
        """What ``<atom>.name`` (or its call) gives; None after a finding."""
        if atom == REPORTED:
            return {REPORTED}
        if atom.startswith(MODULE):
            found = self.module_attribute(atom, name, node)
            if found is None or not called:
                return found
            results: set[str] = set()
            for each in found:
                result = self.call(each, call)
                if result is None:
                    return None
                results |= result
            return results
        if name.startswith("_") and not (name == "_version" and atom in (TENSOR, INPUT, UNKNOWN)) and \
                not (atom.startswith(OBJECT) and self.object_has(atom[len(OBJECT):], name)):
            self.find("forbidden_construct", node, "private",
                      f"{_shown(node)}: .{name} is private; use the public tensor, module and stream members of the"
                      " contract.")
            return None
        if atom.startswith(OBJECT):
            return self.object_attribute(atom[len(OBJECT):], name, node, called, call)
        if atom.startswith(LAYER) or atom == UNKNOWN:
            found = self.layer_attribute(atom, name)
            if found is not None and called:
                if NN_METHOD in found:
                    return self.module_method(atom, name, call)
                if FILE_METHOD in found:
                    self.arguments(call)
                    return {UNKNOWN}
                callables = found - {TENSOR, NUMBER}
                if callables:
                    results: set[str] = set()
                    for each in callables:
                        result = self.call(each, call)
                        if result is None:
                            return None
                        results |= result
                    return results
            elif found is not None and found - {NN_METHOD, FILE_METHOD}:
                return found - {NN_METHOD, FILE_METHOD}
        if atom.startswith(OPERATOR):
            if called:
                self.arguments(call, reads_numbers=True)  # as the extension's functions (call())
                return {UNKNOWN}
            return {atom + "." + name}
        tables = self.value_tables(atom)
        for properties, methods in tables:
            if not called and name in properties:
                return {properties[name]}
            if name in methods:
                if not called:
                    break
                return self.method_call(atom, name, methods[name], call)
        return self.attribute_refused(atom, name, node, called)

    def value_tables(self, atom: str):
        construction = not self.in_forward
        tensor_methods = TENSOR_METHODS | (TENSOR_CONSTRUCTION_METHODS if construction else {})
        if atom in (TENSOR, INPUT, LAYER + "?"):
            # An element of an nn container may be a parameter of a ParameterList or ParameterDict.
            return [(TENSOR_PROPERTIES, tensor_methods)]
        if atom == UNKNOWN:
            return [(TENSOR_PROPERTIES, tensor_methods), (STREAM_PROPERTIES, CONTAINER_METHODS | STREAM_MEMBERS |
                                                          EVENT_MEMBERS | GRAPH_MEMBERS)]
        if atom == SHAPE:
            return [({}, SHAPE_METHODS)]
        if atom == STRING:
            return [({}, STRING_METHODS)]
        if atom == CONTAINER:
            return [({}, CONTAINER_METHODS)]
        if atom == NUMBERS:
            return [({}, NUMBERS_METHODS)]
        if atom == STREAM:
            return [(STREAM_PROPERTIES, STREAM_MEMBERS)]
        if atom == EVENT:
            return [({}, EVENT_MEMBERS)]
        if atom == GRAPH:
            return [({}, GRAPH_MEMBERS)]
        if atom in (DTYPE, DEVICE, METADATA):
            return [({name: NUMBER for name in METADATA_PROPERTIES}, {})]
        return []

    def attribute_refused(self, atom: str, name: str, node, called: bool) -> None:
        shown = _shown(node)
        if atom in (TENSOR, INPUT, UNKNOWN) and (name in TENSOR_CONSTRUCTION_METHODS or called) and \
                name not in TENSOR_METHODS and name not in TENSOR_PROPERTIES:
            where = "in code that runs in forward" if self.in_forward else "here"
            self.find("forbidden_operation", node, "tensor-method",
                      f"{shown}: .{name}() is not a tensor creation, copy, view or metadata method, so it is torch"
                      f" compute {where}; do the computation in your kernels.")
        elif atom in (TENSOR, INPUT, UNKNOWN) and name in TENSOR_METHODS and not called:
            self.find("forbidden_construct", node, "value",
                      f"{shown}: takes the method .{name} without calling it; call it directly.")
        else:
            what = atom.split(":", 1)[-1]
            self.find("forbidden_construct", node, "attribute",
                      f"{shown}: .{name} is not an attribute the contract allows on {self.describe(atom)}"
                      f" ({what}).")
        return None

    def describe(self, atom: str) -> str:
        if atom in (TENSOR, INPUT):
            return "a tensor (creation, copies, views and metadata only)"
        if atom.startswith(LAYER):
            return "an nn module (its parameters, buffers, submodules and settings)"
        if atom.startswith(OBJECT):
            return f"a {atom[len(OBJECT):]} (attributes it assigns itself and nn.Module's parameters(), buffers(), ...)"
        if atom.startswith((MEMBER, BUILTIN, FUNCTION, CLASS, EXTENSION)):
            return "a function or class"
        return f"a value of kind '{atom}'"

    def object_has(self, class_name: str, name: str) -> bool:
        return self.object_lookup(class_name, name, set()) is not None

    def object_lookup(self, class_name: str, name: str, visiting: set[str]):
        """('method', qualified) or ('attribute', atoms) for a name of a class of the file."""
        info = self.classes.get(class_name)
        if info is None or class_name in visiting:
            return None
        visiting.add(class_name)
        if name in info.methods:
            return ("method", info.methods[name])
        if name in self.attributes.get(class_name, {}) or name in info.body_names:
            return ("attribute", set(self.attributes.get(class_name, {}).get(name, ())) or self.missing())
        for base in info.bases:
            found = self.object_lookup(base, name, visiting)
            if found is not None:
                return found
        return None

    def object_attribute(self, class_name: str, name: str, node, called: bool, call) -> set[str] | None:
        found = self.object_lookup(class_name, name, set())
        if found is not None:
            kind, payload = found
            if kind == "method":
                atoms = {FUNCTION + payload}
                if not called:
                    # A bound method taken as a value: whatever calls it later is not followed.
                    self.escaped.add(payload)
                    received = self.call_arguments.setdefault(payload, {})
                    for parameter in self.functions[payload].parameters[1:]:
                        self.merge(received, parameter, {UNKNOWN})
                        self.passed.setdefault(payload, set()).add(parameter)
            else:
                atoms = payload
            if not called:
                return atoms
            results: set[str] = set()
            for atom in sorted(atoms):
                result = self.call(atom, call)
                if result is None:
                    return None
                results |= result
            return results
        if self.is_module_class(class_name):
            if not called and name in NN_MODULE_PROPERTIES:
                return {NN_MODULE_PROPERTIES[name]}
            if called and name in NN_MODULE_METHODS:
                return self.module_method(OBJECT + class_name, name, call)
        if not self.report:
            return set()
        self.find("forbidden_construct", node, "attribute",
                  f"{_shown(node)}: {class_name} never assigns .{name} (nor defines a method of that name), and it is"
                  " not one of nn.Module's members a candidate may use (parameters(), buffers(), register_buffer(),"
                  " training, ...).")
        return None

    def layer_attribute(self, atom: str, name: str) -> set[str] | None:
        """The atoms of an attribute of an nn module (None if it has none of that name)."""
        results: set[str] = set()
        if name in NN_LAYER_TENSORS or NN_LAYER_PARAMETER.fullmatch(name):
            results.add(TENSOR)
        if name in NN_LAYER_SUBMODULES:
            results.add(LAYER + "?")
        if name in NN_LAYER_SETTINGS:
            results.add(NUMBER)
        if name in NN_MODULE_PROPERTIES:
            results.add(NN_MODULE_PROPERTIES[name])
        if name in self.declared_keys:
            results.add(LAYER + "?")
        for attributes in self.attributes.values():
            if name in attributes:
                results |= attributes[name]
        if name in NN_MODULE_METHODS or (name in NN_CONTAINER_METHODS and (
                atom == UNKNOWN or atom[len(LAYER):] in NN_CONTAINERS | {"?"})):
            results.add(NN_METHOD)
        if atom == UNKNOWN:
            for info in self.classes.values():
                if name in info.methods:
                    # Called on a value the grammar cannot follow: checked as if forward called it.
                    self.escaped.add(info.methods[name])
                    results.add(FILE_METHOD)
        return results or None

    def module_method(self, receiver: str, name: str, call: ast.Call) -> set[str]:
        if name in NN_CONTAINER_METHODS and name not in NN_MODULE_METHODS:
            self.arguments(call, reads_numbers=True)
            return {NN_CONTAINER_METHODS[name]}
        if name in ("register_buffer", "register_parameter", "register_module", "add_module"):
            first = call.args[0] if call.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                self.find("forbidden_construct", call, "reflection",
                          f"{name}() with a computed name hides what is registered; pass a string literal.")
            elif _is_dunder(first.value) or first.value in NN_MODULE_MEMBERS:
                self.find("forbidden_construct", call, "reserved",
                          f"{name}({first.value!r}) shadows a member of nn.Module; use another name.")
            self.arguments(call)
            if receiver.startswith(OBJECT) and isinstance(first, ast.Constant) and isinstance(first.value, str):
                registered = LAYER + "?" if name in ("register_module", "add_module") else TENSOR
                self.merge(self.attributes.setdefault(receiver[len(OBJECT):], {}), first.value, {registered})
            return {NONE}
        self.arguments(call, reads_numbers=True)
        return {NN_MODULE_METHODS[name]}

    def method_call(self, atom: str, name: str, result: str, call: ast.Call) -> set[str]:
        # An ordinary container keeps what it is given, out of the inference's sight.
        positional, keywords = self.argument_atoms(call, reads_numbers=atom not in (UNKNOWN, CONTAINER))
        if self.hands_read_back(call, positional + keywords):
            return {REPORTED}
        if atom == NUMBERS:
            if name in NUMBERS_FILLING:
                self.fill_numbers({NUMBERS}, set().union(*positional, *keywords))
            if name in ("get", "pop", "setdefault"):  # a default is what the call may give
                return {NUMBER, NONE} | (positional[1] if len(positional) > 1 else set())
            return self.numbers() if result == NUMBERS else {result}
        if name in ("size", "stride") and (call.args or call.keywords):
            return {NUMBER}
        if atom == UNKNOWN and result == UNKNOWN:
            return {UNKNOWN}
        return {result}

    # -- modules -------------------------------------------------------------------------------------------
    def module_attribute(self, atom: str, name: str, node) -> set[str] | None:
        path = atom[len(MODULE):]
        full = f"{path}.{name}"
        if path in self.contract.extension_modules:
            if name.startswith("_"):
                self.find("forbidden_construct", node, "private",
                          f"{full} is private to the extension; call its public functions.")
                return None
            return {EXTENSION + full}
        if path.startswith("torch.ops.") and path.count(".") == 2:
            if name.startswith("_"):
                self.find("forbidden_construct", node, "private", f"{full} is private.")
                return None
            return {OPERATOR + full}
        table = self.contract.module_table(path)
        member = table.get(name) if table is not None else None
        if member is None:
            self.module_attribute_refused(path, name, node)
            return None
        if member.kind == "module":
            return {MODULE + member.target}
        if member.kind == "value":
            return set(member.result)
        if member.kind == "annotation" and not self.annotation:
            self.find("forbidden_construct", node, "annotation",
                      f"{full} belongs in type annotations only.")
            return None
        return {MEMBER + full}

    def module_attribute_refused(self, path: str, name: str, node) -> None:
        full = f"{path}.{name}"
        if name.startswith("_"):
            self.find("forbidden_construct", node, "torch-private" if path.startswith("torch") else "private",
                      f"{full} reaches private internals; use the public members of the contract.")
        elif path == "torch" and name == "ops":
            self.find("forbidden_operation", node, "torch-ops",
                      f"{full}: torch.ops runs torch operators; implement the computation in your extension.")
        elif path == "torch" and name in TORCH_GLOBAL:
            self.find("forbidden_construct", node, "torch-global",
                      f"{full} is outside the candidate contract (no compilation, tracing, global settings,"
                      " profilers or harness utilities).")
        elif path == "torch.nn.functional":
            self.find("forbidden_operation", node, "torch-functional",
                      f"{full} is torch compute; inside ModelNew only your extension and tensor creation and metadata"
                      " operations may run.")
        elif path == "torch":
            self.find("forbidden_operation", node, "torch-compute",
                      f"{full} is not part of the candidate contract: torch may be used for "
                      f"{MODULE_PURPOSE['torch']}; anything else is torch compute. Implement it in your kernels.")
        elif path == "torch.nn":
            self.find("forbidden_construct", node, "torch-nn",
                      f"{full} is not part of the candidate contract; torch.nn may be used for"
                      f" {MODULE_PURPOSE['torch.nn']}.")
        elif path == "torch.cuda":
            self.find("forbidden_construct", node, "torch-cuda",
                      f"{full} is not allowed; of torch.cuda, {MODULE_PURPOSE['torch.cuda']} are.")
        else:
            table = self.contract.module_table(path) or {}
            purpose = MODULE_PURPOSE.get(path) or _listing(table)
            self.find("forbidden_construct", node, "module-attribute",
                      f"{full} is not part of the candidate contract: of {path}, model_new.py may use {purpose}"
                      " only.")
        return None

    # -- calls -------------------------------------------------------------------------------------------------
    def hands_read_back(self, call: ast.Call, arguments: list[set[str]]) -> bool:
        """In forward, a value read back may go to the extension and the file's own functions
        only: torch's functions and the methods of values would compute with it (a tensor as
        large as the value, a slice as long) or keep it. ``arguments``: the atoms of the call's
        arguments, keywords included. Reported when it would."""
        if self.in_forward and any(READ_BACK in atoms for atoms in arguments):
            self.read_back_use(call, "hands to " + _shown(call.func) + "()")
            return True
        return False

    def arguments(self, call: ast.Call, tracked: bool = False, reads_numbers: bool = False) -> list[set[str]]:
        """Evaluates a call's arguments and gives the positional ones' atoms (see
        argument_atoms)."""
        return self.argument_atoms(call, tracked, reads_numbers)[0]

    def argument_atoms(self, call: ast.Call, tracked: bool = False,
                       reads_numbers: bool = False) -> tuple[list[set[str]], list[set[str]]]:
        """Evaluates a call's arguments: (positional atoms, keyword atoms). ``tracked`` for calls
        into the file's own functions, which may receive modules and functions (the inference
        follows them there); ``reads_numbers`` for callees known to leave a list of numbers as
        it is (torch's functions, the builtins that read): anywhere else, one may come back
        changed."""
        evaluate = self.expr if tracked else self.value
        positional = [evaluate(argument) for argument in call.args]
        keywords = [evaluate(keyword.value) for keyword in call.keywords]
        if not (tracked or reads_numbers):
            for atoms in positional + keywords:
                self.escape_numbers(atoms)
        return positional, keywords

    def call(self, atom: str, node: ast.Call) -> set[str] | None:
        if atom == REPORTED:
            self.arguments(node)
            return {REPORTED}
        if atom.startswith(BUILTIN):
            return self.builtin_call(atom[len(BUILTIN):], node)
        if atom.startswith(MEMBER):
            return self.member_of_module_call(atom[len(MEMBER):], node)
        if atom.startswith((EXTENSION, OPERATOR)):
            # Lists of numbers (sizes, strides, tile shapes) are what kernels are handed. Native
            # code could change one, but it computes whatever it could put there anyway, and a
            # tensor put there meets the forward guard as soon as Python computes on it.
            self.arguments(node, reads_numbers=True)
            return {UNKNOWN}
        if atom.startswith(FUNCTION):
            return self.local_call(atom[len(FUNCTION):], node, skip_self=False)
        if atom.startswith(CLASS):
            class_name = atom[len(CLASS):]
            constructor = self.find_method(class_name, "__init__")
            if constructor is not None:
                self.local_call(constructor, node, skip_self=True)
            else:
                self.arguments(node)
            return {OBJECT + class_name}
        if atom.startswith(OBJECT):
            forward = self.find_method(atom[len(OBJECT):], "forward")
            if forward is None:
                self.arguments(node)
                return {UNKNOWN}
            return self.local_call(forward, node, skip_self=True)
        if atom == SUPER_INIT:
            return self.super_init(node)
        if atom.startswith(LAYER):
            return self.layer_call(atom, node)
        self.find("forbidden_construct", node, "call",
                  f"{_shown(node)} calls a value the checks cannot identify; call functions of your extension, of"
                  " the contract's modules, or of model_new.py directly.")
        return None

    def find_method(self, class_name: str, name: str) -> str | None:
        found = self.object_lookup(class_name, name, set())
        return found[1] if found and found[0] == "method" else None

    def local_call(self, qualified: str, node: ast.Call, skip_self: bool) -> set[str]:
        info = self.functions.get(qualified)
        if info is None:
            self.arguments(node)
            return {UNKNOWN}
        self.edges.setdefault(self.caller(), set()).add(qualified)
        positional = self.arguments(node, tracked=True)
        bound = skip_self or (info.owner is not None and isinstance(node.func, ast.Attribute))
        parameters = info.parameters[1:] if bound else info.parameters
        received = self.call_arguments.setdefault(qualified, {})
        passed = self.passed.setdefault(qualified, set())
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            for name in parameters:
                self.merge(received, name, {UNKNOWN})
                passed.add(name)
        else:
            for name, atoms in zip(parameters, positional):
                self.merge(received, name, atoms)
                passed.add(name)
            for keyword in node.keywords:
                if keyword.arg in parameters:
                    self.merge(received, keyword.arg, self.expr_quiet(keyword.value))
                    passed.add(keyword.arg)
        return set(self.returns.get(qualified, ())) or ({NONE} if self.report else set())

    def super_init(self, node: ast.Call) -> set[str]:
        if self.function is None or self.function.node.name != "__init__" or self.function.owner is None:
            self.find("forbidden_construct", node, "super",
                      "super().__init__() belongs in __init__ only.")
            return None
        info = self.classes[self.function.owner]
        for base in info.bases:
            constructor = self.find_method(base, "__init__")
            if constructor is not None:
                return self.local_call(constructor, node, skip_self=True)
        self.arguments(node)
        return {NONE}

    def layer_call(self, atom: str, node: ast.Call) -> set[str]:
        self.arguments(node)
        if not self.in_forward:
            return {UNKNOWN}
        forwards = [info.methods["forward"] for info in self.classes.values()
                    if "forward" in info.methods and self.is_module_class(info.name)]
        if atom == LAYER + "?" and forwards:
            # An element of an nn container may be a module of the file: any of their forwards may run.
            self.edges.setdefault(self.caller(), set()).update(forwards)
            return {UNKNOWN}
        kind = atom[len(LAYER):]
        self.find("forbidden_operation", node, "layer-call",
                  f"{_shown(node)} calls an nn {kind if kind != '?' else 'module'}, which runs torch's computation;"
                  " keep the layer for its parameters and pass them to your extension.")
        return {REPORTED}

    def builtin_call(self, name: str, node: ast.Call) -> set[str] | None:
        if name == "super":
            if node.args and (len(node.args) != 2 or self.function is None or self.function.owner is None):
                self.find("forbidden_construct", node, "super", "use super().__init__() or"
                          " super(ModelNew, self).__init__() in __init__.")
                return None
            for argument in node.args:
                self.expr(argument)
            return {SUPER}
        if name == "isinstance":
            if len(node.args) == 2:
                self.value(node.args[0])
                second = node.args[1]
                parts = second.elts if isinstance(second, ast.Tuple) else [second]
                classes = set().union(*(self.expr(part) for part in parts)) if parts else set()
                if not all(a.startswith((MEMBER, CLASS, BUILTIN)) or a in (SHAPE, CONTAINER, REPORTED)
                           for a in classes):
                    self.find("forbidden_construct", node, "isinstance",
                              "isinstance() takes classes (or a tuple of classes) as its second argument.")
            return {NUMBER}
        positional = self.arguments(node, reads_numbers=name in NUMBERS_READERS)
        if self.in_forward and name != "print" and any(READ_BACK in atoms for atoms in positional):
            self.read_back_arithmetic(node, _shown(node))
            return {REPORTED}
        if name in NUMBER_CONVERSIONS and self.in_forward and positional and \
                not self.provable(positional[0] - {CONTAINER}, empty=True):
            # A number made of a tensor's data (float(x[0]), int(extension_result)): only
            # a Python number, a shape or a constructor argument converts to a plain number.
            return {READ_BACK}
        if name in DATA_READING_BUILTINS and self.in_forward:
            for argument, atoms in zip(node.args, positional):
                elements = atoms if name == "str" else self.elements_of(argument, atoms)
                if not self.provable(elements, empty=True):
                    self.tensor_truth(node, _shown(node), DATA_READING_BUILTINS[name])
                    return {REPORTED}
        if name in ARITHMETIC_BUILTINS:
            on_tensors = False
            for argument, atoms in zip(node.args, positional):
                elements = atoms
                if name in ("sum", "min", "max") and len(positional) == 1:
                    elements = self.elements_of(argument, atoms)
                if not self.provable(elements, empty=True):
                    if self.in_forward:
                        self.tensor_arithmetic(node, _shown(node))
                        return {REPORTED}
                    on_tensors = True
            # divmod gives a pair of numbers; on a tensor (construction code may compute) any of
            # them gives a tensor.
            return ({SHAPE} if name == "divmod" else {NUMBER}) | ({TENSOR} if on_tensors else set())
        if name == "range" and self.provable(set().union(*positional), empty=True):
            return self.numbers()
        if name in ("tuple", "list", "set", "sorted") and len(positional) == 1 and not node.keywords:
            if not positional[0]:
                return self.missing()
            if self.provable(self.elements_of(node.args[0], positional[0])):
                return {SHAPE} if name == "tuple" else self.numbers()
        return {BUILTINS[name]}

    def elements_of(self, node, atoms) -> set[str]:
        """What iterating ``node`` yields, looking into displays and comprehensions."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return set().union(*(self.expr_quiet(e) for e in node.elts)) if node.elts else {NUMBER}
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.expr_quiet(node.elt)
        return self.element(atoms)

    def member_of_module_call(self, path: str, node: ast.Call) -> set[str] | None:
        module, _, name = path.rpartition(".")
        table = self.contract.module_table(module) or {}
        member = table.get(name)
        positional, keywords = self.argument_atoms(node, reads_numbers=True)
        if self.hands_read_back(node, positional + keywords):
            return {REPORTED}
        if member is None:
            return {UNKNOWN}
        if member.kind == "decorator":
            return {DECORATOR}
        if member.where == CONSTRUCTION and self.in_forward:
            if module == "torch.nn":
                self.find("forbidden_operation", node, "layer-construction",
                          f"{_shown(node)} builds an nn layer inside code that runs in forward (its initialization is"
                          " torch compute); build layers in __init__.")
            else:
                self.find("forbidden_operation", node, "torch-compute",
                          f"{path} is torch compute, allowed only while ModelNew is built; inside forward only your"
                          " extension and tensor creation and metadata operations may run.")
            return {REPORTED}
        if module == "math" and self.in_forward and not all(self.provable(atoms) for atoms in positional):
            self.tensor_arithmetic(node, _shown(node))
            return {REPORTED}
        if path == "torch.Size" and not all(self.provable(self.elements_of(argument, atoms), empty=True)
                                            for argument, atoms in zip(node.args, positional)):
            # A shape made of a tensor's elements holds its data.
            if self.in_forward:
                self.tensor_truth(node, _shown(node), "makes a shape of")
                return {REPORTED}
            return {READ_BACK}
        return set(member.result) or {UNKNOWN}

    # -- annotations ---------------------------------------------------------------------------------------
    def annotate(self, node) -> None:
        annotation, self.annotation = self.annotation, True
        try:
            if isinstance(node, ast.Constant):
                return
            self.expr(node)
        finally:
            self.annotation = annotation


def check_model_new(source: str, file: str = "model_new.py", reference_source: str | None = None,
                    contract: Contract = DEFAULT_CONTRACT) -> list[dict]:
    """The findings of the grammar for one model_new.py, ordered by line."""
    findings = Findings(file)
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as error:
        findings.add("load_error", error.lineno or 0, f"syntax error: {error.msg}", "syntax")
        return findings.items
    grammar = _Grammar(tree, findings, contract)
    grammar.check()
    model_new = next((node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ModelNew"), None)
    if model_new is None:
        findings.add("interface_mismatch", 0, "defines no class ModelNew at module level.", "interface")
    else:
        if not grammar.is_module_class("ModelNew"):
            findings.add("interface_mismatch", model_new,
                         "class ModelNew does not derive from torch.nn.Module; define class ModelNew(nn.Module).",
                         "interface")
        if reference_source:
            want = _init_parameters(reference_source, "Model")
            have = _init_parameters(source, "ModelNew")
            if want is not None and have is not None and want != have:
                findings.add("interface_mismatch", model_new,
                             f"ModelNew.__init__ takes ({', '.join(['self'] + have)}) but Model.__init__ takes"
                             f" ({', '.join(['self'] + want)}); keep Model's constructor signature and parameter"
                             " names.", "interface")
    return sorted(findings.items, key=lambda finding: finding["line"])


def _init_parameters(source: str, class_name: str) -> list[str] | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    arguments = item.args
                    names = [a.arg for a in arguments.posonlyargs + arguments.args][1:]
                    names += [a.arg for a in arguments.kwonlyargs]
                    return names
            return []
    return None

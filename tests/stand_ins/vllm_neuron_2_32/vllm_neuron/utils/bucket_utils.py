"""STAND-IN of the 2.32+ plugin's bucket checks (jinhuang12/vllm-neuron ``vllm_neuron/utils/bucket_utils.py`` at
10c6804db2035ce7de5a19474a00b78223d9ebb4), the functions of the same names, enforcing the same rules with the
plugin's messages verbatim (behaviour, not code):

- ``get_max_num_batched_tokens``: the configured value clamped to ``max_model_len``;
- ``resolve_segmented_prefill_config``: single-shot prefill (``max_num_batched_tokens >= max_model_len``) only up
  to a 16k ``max_model_len``; below ``max_model_len`` (chunked prefill) only a segment size the segmented
  attention kernel supports (512, 1024, 2048, 4096, 8192); returns (segment buckets, prefill buckets);
- ``validate_num_batched_tokens_buckets`` / ``validate_num_seqs_buckets``: non-empty, positive integers,
  strictly ascending, the last equal to its maximum;
- ``validate_kv_segment_size_buckets``: supported sizes, one of them, equal to the prefill buckets when those
  are given.

Standard library only, as the plugin's file is: the harness's preflight loads it by path
(``harness.core.vllm_neuron_preflight``)."""

SUPPORTED_KV_SEGMENT_SIZES = {512, 1024, 2048, 4096, 8192}
MAX_MODEL_LEN_SINGLE_SHOT = 16 * 1024


def get_max_num_batched_tokens(configured_value, max_model_len):
    return configured_value if configured_value < max_model_len else max_model_len


def _check_list(buckets, name, maximum, maximum_name):
    if not buckets:
        raise ValueError(f"{name} cannot be empty")
    if not isinstance(buckets, list):
        raise ValueError(f"{name} must be a list, got {type(buckets).__name__}")
    for index, value in enumerate(buckets):
        if not isinstance(value, int):
            raise ValueError(f"{name}[{index}] must be an integer, got {value}")
        if value <= 0:
            raise ValueError(f"{name}[{index}] must be positive, got {value}")
    if sorted(set(buckets)) != buckets:
        raise ValueError(f"{name} must be in strictly ascending order, got {buckets}")
    if buckets[-1] != maximum:
        raise ValueError(f"Last bucket in {name} must equal {maximum_name} ({maximum}), got {buckets[-1]}")
    return buckets


def validate_num_batched_tokens_buckets(buckets, max_num_batched_tokens):
    return _check_list(buckets, "num_batched_tokens_buckets", max_num_batched_tokens, "max_num_batched_tokens")


def validate_num_seqs_buckets(buckets, max_num_seqs):
    return _check_list(buckets, "num_seqs_buckets", max_num_seqs, "max_num_seqs")


def resolve_segmented_prefill_config(max_num_batched_tokens, max_model_len):
    supported = sorted(SUPPORTED_KV_SEGMENT_SIZES)
    single_shot = max_num_batched_tokens >= max_model_len
    if single_shot and max_model_len <= MAX_MODEL_LEN_SINGLE_SHOT:
        return None, None
    if single_shot:
        raise ValueError(
            f"Single-shot prefill (max_num_batched_tokens={max_num_batched_tokens} >= max_model_len={max_model_len}) "
            f"is only supported when max_model_len <= {MAX_MODEL_LEN_SINGLE_SHOT}. Set max_num_batched_tokens to "
            f"one of {supported} to enable chunked prefill.")
    if max_num_batched_tokens in SUPPORTED_KV_SEGMENT_SIZES:
        return [max_num_batched_tokens], [max_num_batched_tokens]
    alternative = (f" Alternatively, set max_num_batched_tokens={max_model_len} (equal to max_model_len) to disable "
                   f"chunked prefill." if max_model_len <= MAX_MODEL_LEN_SINGLE_SHOT else "")
    raise ValueError(f"max_num_batched_tokens={max_num_batched_tokens} is not a supported chunked prefill size on "
                     f"Neuron. Supported values: {supported}.{alternative}")


def validate_kv_segment_size_buckets(buckets, num_batched_tokens_buckets, *, allow_independent_query_buckets=False):
    name = "kv_segment_size_buckets"
    if not isinstance(buckets, list) or not buckets:
        raise ValueError(f"{name} must be a non-empty list")
    for index, value in enumerate(buckets):
        if not isinstance(value, int):
            raise ValueError(f"{name}[{index}] must be an integer, got {value}")
    if sorted(set(buckets)) != buckets:
        raise ValueError(f"{name} must be in strictly ascending order, got {buckets}")
    for index, value in enumerate(buckets):
        if value not in SUPPORTED_KV_SEGMENT_SIZES:
            raise ValueError(f"{name}[{index}] = {value} is not a supported segment size. The segmented attention "
                             f"kernel only supports: {SUPPORTED_KV_SEGMENT_SIZES}. Please use one of these values.")
    if len(buckets) > 1:
        raise ValueError(f"Only one segment size is currently supported, got {len(buckets)}: {buckets}.")
    if num_batched_tokens_buckets is not None and not allow_independent_query_buckets \
            and num_batched_tokens_buckets != buckets:
        raise ValueError(
            f"When {name} is set, num_batched_tokens_buckets must match because the segmented kernel currently "
            f"requires the prefill bucket length to equal the segment size. Got num_batched_tokens_buckets="
            f"{num_batched_tokens_buckets}, {name}={buckets}")
    return buckets

"""The bottom layer: error types and their one-line texts, references to a user's code
(`module:function`, paths next to the run file), the version. Standard library only: everything imports it."""

from __future__ import annotations

from autotune.core.errors import (
    STOP_REASONS,
    AutotuneError,
    ConfigError,
    ConfigWarning,
    StorageFault,
    TrialStopped,
    config_warnings_as_lines,
    describe_exception,
    error_signature,
    library_file,
    lookup,
    message_and_where,
    one_of,
    redact,
    shorten,
    shown,
    storage_fault,
    suggest,
    unknown,
    user_frame,
    user_where,
    warn_config,
)
from autotune.core.lifetime import exit_text
from autotune.core.userref import (
    ADAPTER,
    ONE_DEVICE,
    adapter_mark,
    as_imported,
    check_fit_signature,
    code_where,
    file_stem,
    importable,
    load_factory,
    module_argv,
    one_device_adapter,
    resolve_path,
    user_code_allowed,
    without_user_code,
)
from autotune.core.version import __version__

__all__ = [
    "AutotuneError", "ConfigError", "ConfigWarning", "STOP_REASONS", "TrialStopped", "__version__", "library_file",
    "check_fit_signature", "ADAPTER", "ONE_DEVICE", "adapter_mark", "as_imported", "code_where",
    "config_warnings_as_lines",
    "describe_exception", "error_signature", "exit_text", "file_stem", "importable", "load_factory", "lookup",
    "message_and_where", "module_argv", "one_of", "one_device_adapter", "redact", "resolve_path", "shorten", "shown",
    "suggest",
    "unknown", "user_code_allowed", "user_frame", "user_where", "warn_config", "without_user_code",
    "StorageFault", "storage_fault",
]

"""attnbias_client: the former single-file client, kept so that
``from attnbias_client import Client, AttnbiasError`` goes on working.

The client is now the ``attnbias`` package beside this file (installable
with ``pip install ./api/python``); this module re-exports its names.
"""

from attnbias import (AttnbiasError, BFloat16, Client, IgnoredFieldsWarning,
                      __version__, safetensors_dumps, safetensors_loads)

__all__ = ["Client", "AttnbiasError", "IgnoredFieldsWarning", "BFloat16",
           "safetensors_dumps", "safetensors_loads", "__version__"]

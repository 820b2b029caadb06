"""pagoda - the Python binding of libpagoda, the client library of pagodad.

It talks to a pagodad running on this host through the installed
``libpagoda.so`` (ctypes); nothing here loads a model.  Quick use::

    import pagoda

    with pagoda.Client() as c:          # $PAGODA_SOCKET or the default
        print(c.generate("The sky is", max_tokens=16, temperature=0).text)
        for piece in c.stream("Once upon a time", max_tokens=32):
            print(piece, end="", flush=True)
        reply = c.chat([{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hello!"}])

and for asyncio, :class:`AsyncClient` with the same methods, awaited.
Failures raise :class:`Error` (``.code``, ``.name``, ``.message``).  The
library is found through ``$PAGODA_LIBRARY`` (a path), else the system's
``libpagoda.so.1``.  See pagoda-python(7).
"""
from ._client import (ERROR_CODES, PARAMETERS, AsyncClient, ChatInfo, Client,
                      Completion, Error, Event, Figures, ModelInfo, Sample)
from ._lib import DEFAULT_SOCKET, SEED_RANDOM, LibraryNotFound

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "ChatInfo", "Client", "Completion", "DEFAULT_SOCKET", "ERROR_CODES",
    "Error", "Event", "Figures", "LibraryNotFound", "ModelInfo", "PARAMETERS",
    "SEED_RANDOM", "Sample", "__version__",
]

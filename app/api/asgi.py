"""An ASGI app built from the environment's settings, for ``uvicorn app.api.asgi:app`` and multi-worker runs."""

from app.api.main import create_app
from app.settings import get_settings

app = create_app(get_settings())

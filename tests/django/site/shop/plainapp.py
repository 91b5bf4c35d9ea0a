"""A plain App of the project's own (settings.WORKHORSE['APP'] may name one instead of DjangoApp)."""

import os

from workhorse import App

app = App(
    f"dbname={os.environ['WHDJ_NAME']} host={os.environ['WHDJ_HOST']} port={os.environ['WHDJ_PORT']} "
    f"user={os.environ['WHDJ_USER']}",
    schema=os.environ["WHDJ_SCHEMA"],
)

"""Plain workhorse jobs on the project's DjangoApp (get_app() builds it from settings)."""

from workhorse.contrib.django import get_app

app = get_app()


@app.job(name="shop.receipt", tenant="none")
def receipt(ctx, payload):
    return payload["order"]

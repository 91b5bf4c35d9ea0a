"""Plain workhorse jobs on the project's DjangoApp (get_app() builds it from settings); the
worker imports this module through settings.WORKHORSE['TASK_MODULES']."""

from workhorse import Retry
from workhorse.contrib.django import get_app

app = get_app()


@app.job(name="shop.receipt", tenant=lambda p: f"org-{p['org']}")
def receipt(ctx, payload):
    return payload["order"]


def reserve(order):
    return {"reserved": order}


def charge(order):
    raise LookupError(f"card declined for order {order}")


@app.job(name="shop.checkout", tenant="none", retry=Retry(attempts=1))
async def checkout(ctx, payload):
    await ctx.step.run("reserve", reserve, payload["order"])
    await ctx.step.run("charge", charge, payload["order"])

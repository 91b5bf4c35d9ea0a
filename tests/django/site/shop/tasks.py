"""Django tasks of the test project, run on workhorse (TASKS in djproject/settings.py)."""

from pathlib import Path

from shop.models import Order
from workhorse import Retry
from workhorse.contrib.django.tasks import workhorse_options

try:  # Django 6
    from django.tasks import task
except ImportError:  # the django-tasks backport on older Django
    from django_tasks import task


@task
def add(a, b):
    return a + b


@task(queue_name="emails", priority=5)
def shout(text):
    return text.upper()


@task
def place_order(number):
    return Order.objects.create(number=number).pk


@task
def explode(message):
    raise ValueError(message)


@task
@workhorse_options(retry=Retry(attempts=3, base=0))
def flaky(marker):
    """Fails on its first two attempts (counted in a file), then answers how many it took."""
    path = Path(marker)
    tries = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(tries))
    if tries < 3:
        raise RuntimeError(f"attempt {tries} fails")
    return tries


@task(takes_context=True)
def which_attempt(context, word):
    return {"attempt": context.attempt, "word": word, "id": context.task_result.id}


@task
async def async_add(a, b):
    return a + b


@task
@workhorse_options(tenant=lambda org, **_: f"org-{org}")
def for_org(org, amount=0):
    return amount

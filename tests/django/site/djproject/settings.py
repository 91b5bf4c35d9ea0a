"""The test project's settings: the database and schema come from the environment the tests set."""

import os

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["testserver", "localhost"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "djproject.urls"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["WHDJ_NAME"],
        "USER": os.environ.get("WHDJ_USER", "postgres"),
        "PASSWORD": os.environ.get("WHDJ_PASSWORD", ""),
        "HOST": os.environ.get("WHDJ_HOST", "127.0.0.1"),
        "PORT": os.environ.get("WHDJ_PORT", "5432"),
    }
}

WORKHORSE = {"SCHEMA": os.environ["WHDJ_SCHEMA"], "TASK_MODULES": ["shop.jobs"]}

TASKS = {
    "default": {
        "BACKEND": "workhorse.contrib.django.tasks.WorkhorseBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"RETRY": {"attempts": 1}},
    }
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "workhorse.contrib.django",
    "shop",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

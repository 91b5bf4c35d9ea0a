from django.db import models


class Order(models.Model):
    number = models.IntegerField()

"""Django migrations of ``workhorse.contrib.django``: migration 00NN applies workhorse's schema
migration NNN (``workhorse/_db/migrations/NNN_*.sql``) through ``ApplyWorkhorseMigration``.
A new workhorse migration file gets its Django migration here too (a test checks every file has one)."""

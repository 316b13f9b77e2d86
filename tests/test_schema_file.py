"""The store's schema in one file: store/current_schema.sql is what the migrations make, to the letter and in
DuckDB's catalog, and a new migration without a regenerated file fails here."""

import shutil

import duckdb

from store.db import migrate
from store.schema_file import catalog, current_schema, migrated, render


def test_the_schema_file_is_the_migrations_result_to_the_letter():
    assert current_schema() == render(migrated()), "regenerate: python -m store.schema_file > store/current_schema.sql"


def test_a_database_made_from_the_file_has_the_migrated_catalog_and_needs_no_migration():
    con = duckdb.connect(":memory:")
    con.execute(current_schema())
    want = catalog(migrated())
    assert catalog(con) == want and len(want["columns"]) > 100 and {v for v, _ in want["views"]} >= {"pairs"}
    assert migrate(con) == (want["version"][0][0],) * 2  # at the latest version already: nothing to run


def test_a_new_migration_changes_what_the_file_must_say(tmp_path):
    from importlib import resources

    folder = tmp_path / "migrations"
    shutil.copytree(str(resources.files("store").joinpath("migrations")), folder)
    (folder / "0099_thumbs.sql").write_text("ALTER TABLE rankings ADD COLUMN thumbs BOOLEAN;")
    con = duckdb.connect(":memory:")
    migrate(con, folder)
    changed = render(con)
    assert changed != current_schema() and "thumbs BOOLEAN" in changed and "VALUES (99);" in changed
    assert catalog(con)["columns"] != catalog(migrated())["columns"]

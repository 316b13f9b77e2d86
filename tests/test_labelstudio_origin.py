"""Label Studio ranking keys name their server and project: another server or project with the same task and
annotation ids is imported, not taken for a re-import; a known key with changed content is a conflict.

Live pulls go through `import_labelstudio_tasks`, the step after the network call, so no server is started."""

import copy
import json

import pytest
from label_studio_sdk.converter.converter import Format

from annotation.imports import import_labelstudio_tasks
from annotation.labelstudio import server_url
from store.db import write
from store.errors import UserError
from tests.builders import FIRST_IMPORT, LS, RANKER, REIMPORT, convert
from tests.conftest import query, store_rows


def export(tmp_path, tasks, name="export.json"):
    f = tmp_path / name
    f.write_text(json.dumps(tasks))
    return f


def in_project(project: int) -> list:
    """The fixture's tasks as another project with the same task and annotation ids exports them."""
    tasks = copy.deepcopy(RANKER)
    for a in (a for t in tasks for a in t["annotations"]):
        a["project"] = project
    return tasks


def keys(db) -> set[str]:
    return {k for (k,) in query(db, "SELECT external_key FROM rankings")}


def test_another_project_with_the_same_ids_is_added_and_each_file_imports_once(cli, db, tmp_path):
    p5, p9 = LS / "ranker_rank.json", export(tmp_path, in_project(9))
    assert cli("import-ls", str(p5))[1].strip() == FIRST_IMPORT
    assert cli("import-ls", str(p9))[1].strip() == FIRST_IMPORT  # today: "already imported 3"
    assert query(db, "SELECT count(*) FROM rankings") == [(6,)]
    assert query(db, "SELECT count(*) FROM pairs") == [(30,)]  # 15 + 15
    assert "ls:file/p9:17:101" in keys(db) and "ls:file/p5:17:101" in keys(db)
    before = store_rows(db)
    for f in (p5, p9):
        assert cli("import-ls", str(f))[1].strip() == REIMPORT
    assert store_rows(db) == before


def test_two_servers_with_the_same_project_are_kept_apart(db):
    for url in ("http://127.0.0.1:8080", "https://ls.example.org"):
        assert import_labelstudio_tasks(db, RANKER, url, 3).line() == FIRST_IMPORT
    assert {k for k in keys(db) if k.endswith(":17:101")} == {
        "ls:http://127.0.0.1:8080/p3:17:101",
        "ls:https://ls.example.org:443/p3:17:101",
    }
    origins = {o for (o,) in query(db, "SELECT origin FROM imports")}
    assert origins == {"http://127.0.0.1:8080#project=3", "https://ls.example.org:443#project=3"}


def test_one_server_spelled_two_ways_is_one_origin_and_its_credentials_are_not_stored(db):
    assert import_labelstudio_tasks(db, RANKER, "http://127.0.0.1:8080", 3).line() == FIRST_IMPORT
    before = store_rows(db)
    again = import_labelstudio_tasks(db, RANKER, "HTTP://me:s3cret@127.0.0.1:8080/projects/3/", 3)
    assert again.line() == REIMPORT
    assert store_rows(db) == before and "s3cret" not in repr(before)


def test_a_file_after_a_live_pull_of_its_project_adds_nothing(cli, db):
    assert import_labelstudio_tasks(db, RANKER, "http://127.0.0.1:8080", 5).line() == FIRST_IMPORT
    before = store_rows(db)
    assert cli("import-ls", str(LS / "ranker_rank.json"))[1].strip() == REIMPORT  # the file names project 5
    assert store_rows(db) == before


def test_an_old_store_takes_a_new_project_but_not_the_same_export_again(cli, db, tmp_path):
    cli("import-ls", str(LS / "ranker_rank.json"))
    # a store written before keys named their origin: 'ls:<task>:<annotation>'
    with write(db) as con:
        con.execute("UPDATE rankings SET external_key = replace(external_key, 'ls:file/p5:', 'ls:')")
    assert keys(db) == {"ls:17:101", "ls:17:103", "ls:18:104"}
    before = store_rows(db)
    assert cli("import-ls", str(LS / "ranker_rank.json"))[1].strip() == REIMPORT
    assert store_rows(db) == before
    # project 9's annotations differ from the stored ones with the same ids: they are new
    other = in_project(9)
    other[0]["annotations"][0]["result"][0]["value"]["ranker"]["rank"] = ["r1", "r0", "r2", "r3"]
    out = cli("import-ls", str(export(tmp_path, other)))[1]
    assert "rankings added 1," in out and "already imported 2" in out and "conflicts" not in out


@pytest.mark.parametrize("fmt", [Format.JSON_MIN, Format.CSV], ids=lambda f: f.name)
def test_an_export_that_names_no_project_after_the_json_adds_nothing(cli, db, tmp_path, fmt):
    cli("import-ls", str(LS / "ranker_rank.json"))
    before = store_rows(db)
    out = cli("import-ls", str(convert(tmp_path, RANKER, LS / "ranker_config.xml", fmt)))[1]
    assert "rankings added 0" in out and "already imported 3" in out
    assert store_rows(db) == before


def _rerank(tasks):  # annotation 101 now ranks r0 first (was r2, r0, r3, r1)
    tasks[0]["annotations"][0]["result"][0]["value"]["ranker"]["rank"] = ["r0", "r2", "r3", "r1"]


def _reword(tasks):  # a response of task 17, which both its annotations (101, 103) rank
    tasks[0]["data"]["items"][1]["body"] = "It is a kind of fitting, too much of it."


def _reprompt(tasks):
    tasks[0]["data"]["prompt"] = "Explain overfitting in two sentences."


@pytest.mark.parametrize(
    "change, conflicts, already",
    [(_rerank, 1, 2), (_reword, 2, 1), (_reprompt, 2, 1)],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_a_known_key_with_changed_content_is_a_conflict_and_the_stored_ranking_stays(
    cli, db, tmp_path, change, conflicts, already
):
    cli("import-ls", str(LS / "ranker_rank.json"))
    before = store_rows(db)
    tasks = copy.deepcopy(RANKER)
    change(tasks)
    code, out, err = cli("import-ls", str(export(tmp_path, tasks)))
    assert code == 0, err
    assert out.strip() == (
        f"tasks 2, annotations 4, rankings added 0, pairs added 0, already imported {already}, skipped 1 "
        f"(cancelled 1), flagged 0, conflicts {conflicts} (first ls:file/p5:17:101; the stored ranking is kept)"
    )
    assert store_rows(db) == before


@pytest.mark.parametrize("fmt", [Format.JSON_MIN, Format.CSV], ids=lambda f: f.name)
def test_an_edited_annotation_reexported_without_its_project_is_a_conflict_not_a_second_ranking(cli, db, tmp_path, fmt):
    """Issue 51 item 10: annotation 101 imported from the JSON export (key ls:file/p5:17:101), then edited in Label
    Studio and exported as JSON_MIN or CSV (which name no project): its key ls:17:101 matched the stored one only
    with equal content, so the edit was stored as a second ranking of the same annotation."""
    cli("import-ls", str(LS / "ranker_rank.json"))
    before = store_rows(db)
    tasks = copy.deepcopy(RANKER)
    _rerank(tasks)
    out = cli("import-ls", str(convert(tmp_path, tasks, LS / "ranker_config.xml", fmt)))[1]
    assert "rankings added 0" in out and "already imported 2" in out
    assert "conflicts 1 (first ls:file/p5:17:101; the stored ranking is kept)" in out
    assert store_rows(db) == before


def test_a_conflict_does_not_stop_the_rest_of_the_import(cli, db, tmp_path):
    cli("import-ls", str(LS / "ranker_rank.json"))
    tasks = copy.deepcopy(RANKER)
    _rerank(tasks)
    new = copy.deepcopy(tasks[1]["annotations"][0])
    new["id"], new["completed_by"] = 105, 6
    tasks[1]["annotations"].append(new)
    out = cli("import-ls", str(export(tmp_path, tasks)))[1]
    assert "rankings added 1, pairs added 3, already imported 2" in out and "conflicts 1 " in out
    (ranks,) = query(
        db,
        "SELECT list(i.rank ORDER BY i.shown_position) FROM rankings k JOIN ranking_items i USING (ranking_id) "
        "WHERE k.external_key = 'ls:file/p5:17:101'",
    )
    assert ranks == ([2, 4, 1, 3],)  # as first imported: r2, r0, r3, r1 best first


@pytest.mark.parametrize(
    "url, server",
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        (" HTTPS://User:Secret@LS.Example.org/projects/3/ ", "https://ls.example.org:443"),
        ("http://ls.example.org:80", "http://ls.example.org:80"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
    ],
)
def test_server_url(url, server):
    assert server_url(url) == server


@pytest.mark.parametrize("url", ["localhost:8080", "ftp://ls.example.org", "http://:8080", "http://ls:99999", ""])
def test_server_url_refuses_what_names_no_server(url):
    with pytest.raises(UserError, match="not a Label Studio URL"):
        server_url(url)


def test_a_bad_url_is_one_line_before_any_network_call(cli, db, monkeypatch):
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "a-token")
    before = store_rows(db)
    code, out, err = cli("import-ls", "--url", "localhost:8080", "--project", "1")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert "not a Label Studio URL" in err and "a-token" not in err
    assert store_rows(db) == before

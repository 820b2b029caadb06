"""Structured output against a real pagodad: the default model sampled at
temperature 1 under each of the twenty schemas of tests/data/schemas,
twenty samples each; every output must parse and validate (Python's
jsonschema package, Draft 2020-12).  Also a GBNF grammar, one that allows
no token (finish "grammar"), and the errors of schemas and grammars pagoda
cannot honour."""
import glob
import json
import os

import pytest

import pagoda

jsonschema = pytest.importorskip("jsonschema")

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = sorted(glob.glob(os.path.join(HERE, "..", "data", "schemas", "*.json")))


def test_twenty_schemas_present():
    assert len(SCHEMAS) == 20, SCHEMAS


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: os.path.basename(p)[:-5])
def test_samples_validate(client, path):
    with open(path) as f:
        schema = json.load(f)
    check = jsonschema.Draft202012Validator(schema)
    name = os.path.basename(path)[:-5].replace("_", " ")
    texts = []
    for seed in (1, 2):	# 2 requests x 10 samples
        r = client.chat([{"role": "user",
                          "content": f"Reply with a JSON {name}."}],
                        json_schema=schema, temperature=1.0, seed=seed * 1000,
                        n=10, max_tokens=1000)
        for s in r.samples:
            assert s.finish == "stop", (s.finish, s.text[-200:])
            texts.append(s.text)
    assert len(texts) == 20
    for t in texts:
        doc = json.loads(t)
        errors = sorted(check.iter_errors(doc), key=str)
        assert not errors, (t, [e.message for e in errors[:3]])


def test_grammar_and_its_end(client):
    g = 'root ::= "The answer is " ("yes" | "no") "."'
    for seed in range(5):
        r = client.generate("Q: Is water wet? A:", grammar=g, temperature=1.0,
                            seed=seed, max_tokens=50)
        assert r.text in ("The answer is yes.", "The answer is no.")
        assert r.finish == "stop"


def test_grammar_that_allows_no_token(client):
    # every character is a token of the model's byte-level vocabulary, but
    # these parses double with every "a": after eleven no token may follow
    g = 'root ::= "x" e\ne ::= "a" e "b" | "a" e "c"'
    r = client.generate("hi", grammar=g, temperature=0, max_tokens=50)
    assert r.finish == "grammar", r.finish
    assert r.text == "x" + "a" * 11, r.text
    done = [ev for ev in client.events(client.submit("hi", grammar=g, temperature=0))
            if ev.type == "done"]
    assert [ev.finish for ev in done] == ["grammar"]


@pytest.mark.parametrize("kw,words", [
    ({"grammar": "root ::= missing"}, "never defined"),
    ({"grammar": "root ::= root \"a\" | \"b\""}, "left recursion"),
    ({"grammar": "root ::= \"unclosed"}, "line 1"),
    ({"json_schema": {"type": "string", "pattern": "(?<=a)b"}}, "lookbehind"),
    ({"json_schema": "{not json"}, "JSON"),
    ({"json_schema": {"type": "integer", "multipleOf": 0.5}}, "multipleOf"),
])
def test_refused_with_a_message(client, kw, words):
    with pytest.raises(pagoda.Error) as e:
        client.generate("hi", max_tokens=4, **kw)
    assert words in str(e.value), str(e.value)


def test_grammar_and_schema_together_refused(client):
    with pytest.raises(pagoda.Error) as e:
        client.generate("hi", grammar='root ::= "a"', json_schema={"type": "string"})
    assert "not both" in str(e.value)

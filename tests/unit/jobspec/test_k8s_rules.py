"""Kubernetes name syntax rules (k8s.io/apimachinery/pkg/util/validation)."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec import rules


@pytest.mark.parametrize(
    "rule, value, ok",
    [
        (rules.dns1035_label, "job-1", True),
        (rules.dns1035_label, "1job", False),
        (rules.dns1035_label, "job-", False),
        (rules.dns1035_label, "Job", False),
        (rules.dns1035_label, "a" * 63, True),
        (rules.dns1035_label, "a" * 64, False),
        (rules.dns1123_label, "1job", True),
        (rules.dns1123_label, "a.b", False),
        (rules.dns1123_subdomain, "a.b-c.d", True),
        (rules.dns1123_subdomain, "a..b", False),
        (rules.dns1123_subdomain, "a" * 254, False),
        (rules.qualified_name, "app", True),
        (rules.qualified_name, "example.com/app_name.v-1", True),
        (rules.qualified_name, "/app", False),
        (rules.qualified_name, "example.com/", False),
        (rules.qualified_name, "Example.com/app", False),
        (rules.qualified_name, "a/b/c", False),
        (rules.qualified_name, "_app", False),
        (rules.qualified_name, "x" * 63, True),
        (rules.qualified_name, "x" * 64, False),
        (rules.qualified_name, ("p" * 60 + ".") * 5 + "p/x", False),  # prefix > 253
        (rules.label_value, "", True),
        (rules.label_value, "A-b_c.9", True),
        (rules.label_value, "a b", False),
        (rules.label_value, "a-", False),
        (rules.label_value, 1, False),
        (rules.annotation_key, "Example.com/Key", True),
        (rules.annotation_key, "bad key", False),
        (rules.env_var_name, "my.env-name", True),
        (rules.env_var_name, "_X1", True),
        (rules.env_var_name, "1X", False),
        (rules.env_var_name, "A=B", False),
        (rules.env_var_name, "..X", False),
        (rules.env_var_name, ".", False),
        (rules.env_var_name, "", False),
        (rules.config_map_key, "key.name_1-x", True),
        (rules.config_map_key, "a/b", False),
        (rules.config_map_key, "..a", False),
    ],
)
def test_rule(rule, value, ok):
    problem = rule(value)
    assert (problem is None) is ok, problem

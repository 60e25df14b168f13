"""The test harness itself: each test has its own PMS_HOME and no PMS_* setting
from the developer's shell, yet the tests that need the model still find it."""
import os
import subprocess
import sys

import pms
from conftest import REPO, TEST_MODEL_DIR


def test_probe_environment_is_clean(isolated_pms_env, tmp_path_factory):
    """Run directly and, by the test below, under a polluted shell."""
    leaked = sorted(n for n in os.environ if n.startswith("PMS_") and n != "PMS_HOME" and not n.startswith("PMS_TEST_"))
    assert leaked == []
    assert pms.data_dir() == isolated_pms_env
    assert isolated_pms_env.is_relative_to(tmp_path_factory.getbasetemp())
    assert pms.config.default_db_path() == isolated_pms_env / "index.sqlite"


def test_each_test_gets_its_own_home(isolated_pms_env, tmp_path):
    # tmp_path's numbered sibling: a new PMS_HOME folder is made for every test, and it starts empty.
    assert list(isolated_pms_env.iterdir()) == []


def test_a_developers_pms_settings_do_not_reach_the_tests(tmp_path):
    polluted = {**os.environ, "PMS_DB": str(tmp_path / "dev.sqlite"), "PMS_HOME": str(tmp_path / "dev-home"),
                "PMS_MODEL": "some/other-model", "PMS_MODEL_DIR": str(TEST_MODEL_DIR), "PMS_MAX_FILE_MB": "1"}
    probe = f"{REPO / 'tests' / 'test_isolation.py'}::test_probe_environment_is_clean"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", probe],
                            cwd=REPO, env=polluted, capture_output=True, text=True, timeout=300)  # a whole pytest start: minutes on a loaded machine
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert not (tmp_path / "dev.sqlite").exists() and not (tmp_path / "dev-home").exists()

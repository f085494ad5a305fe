"""The demo Space in a real browser: `spaces/readonce-qa/app.py` started on a free localhost port and driven with
headless Chromium (Debian's `chromium` + `chromium-driver`) through Selenium. An empty question list shows a message
(no traceback); the example's questions show the answers of the pipeline and the timing; a screenshot is saved in the
test's temporary folder, or, with `HF_READONCE_REFRESH_SCREENSHOT=1`, over `docs/images/space-readonce-qa.png` (the
README shows it; tests write nothing else into the repository).

Needs `pip install "hf-readonce[space]"` and `apt-get install chromium chromium-driver`; skipped without them."""

import os
import shutil
import sys

import pytest

from tests._servers import free_port, running_server
from tests.conftest import REPO_ROOT

pytest.importorskip("gradio", reason='the Space needs gradio: pip install "hf-readonce[space]"')
pytest.importorskip("selenium", reason='the browser test needs selenium: pip install "hf-readonce[space]"')
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("headless Chromium not installed (apt-get install chromium chromium-driver)", allow_module_level=True)

SPACE = REPO_ROOT / "spaces" / "readonce-qa"
SCREENSHOT = REPO_ROOT / "docs" / "images" / "space-readonce-qa.png"
REFRESH_SCREENSHOT = os.environ.get("HF_READONCE_REFRESH_SCREENSHOT") == "1"


@pytest.fixture(scope="module")
def app_module():
    import importlib.util

    from hf_readonce.weights import reference_deformer_path

    try:
        reference_deformer_path()
    except FileNotFoundError as error:
        pytest.skip(f"the Space's model is not installed: {error}")
    spec = importlib.util.spec_from_file_location("readonce_qa_app_browser", SPACE / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app in a subprocess on a free port; yields its URL."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("space") / "app.log"
    env = dict(os.environ, GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port),
               GRADIO_ANALYTICS_ENABLED="False", PYTHONPATH=str(REPO_ROOT / "src"))
    url = f"http://127.0.0.1:{port}/"
    with running_server([sys.executable, str(SPACE / "app.py")], ready_url=url, log_path=log_path, env=env,
                        cwd=SPACE, timeout=240, interval=1, name="the app"):
        yield url
    assert "Traceback" not in log_path.read_text(), log_path.read_text()[-3000:]


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1500"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _fill(driver, elem_id: str, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, f"#{elem_id} textarea")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    if text:
        box.send_keys(text)


def _text(driver, elem_id: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, elem_id).text


def test_space_in_headless_chromium(server, browser, app_module, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    example = app_module.EXAMPLES[0]
    expected = app_module.answer(example["context"], "\n".join(example["questions"]))  # the pipeline, in-process
    browser.get(server)
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#questions textarea"))
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#document textarea").get_attribute("value").strip())
    assert browser.find_element(By.CSS_SELECTOR, "#document textarea").get_attribute("value") == example["context"]

    # an empty question list: a message, no traceback, no answers
    _fill(browser, "questions", "")
    browser.find_element(By.ID, "answer-button").click()
    WebDriverWait(browser, 120).until(lambda d: "Type at least one question" in _text(d, "status"))
    assert "Traceback" not in browser.page_source and "Error" not in _text(browser, "status")
    assert _text(browser, "answers") == ""

    # the example's questions: the pipeline's answers appear with the timing
    _fill(browser, "questions", "\n".join(example["questions"]))
    browser.find_element(By.ID, "answer-button").click()
    WebDriverWait(browser, 600).until(lambda d: "question(s)" in _text(d, "timing"))
    answers, timing = _text(browser, "answers"), _text(browser, "timing")
    assert _text(browser, "status") == ""
    for question, item in zip(example["questions"], expected["answers"]):
        assert question in answers
        if item["answer"]:
            assert item["answer"] in answers
    assert f"{len(example['questions'])} question(s)" in timing and "Both ways gave the same answers." in timing
    assert "Traceback" not in browser.page_source
    screenshot = SCREENSHOT if REFRESH_SCREENSHOT else tmp_path / SCREENSHOT.name
    browser.execute_script("window.scrollTo(0, 0)")
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(max(int(height) + 40, 900), 2400))
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 10_000

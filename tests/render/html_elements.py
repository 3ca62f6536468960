"""An HTML fragment read back as its elements, for the tests of what the renderers write."""

from html.parser import HTMLParser


class Elements(HTMLParser):
    """Every element of ``fragment`` (tag, attributes, text), checked to be balanced; ``img`` has
    no end tag."""

    VOID = {"img"}

    def __init__(self, fragment):
        super().__init__(convert_charrefs=True)
        self.elements, self.open = [], []
        self.feed(fragment)
        self.close()
        assert not self.open, "every element is closed"

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, "attrs": dict(attrs), "text": ""}
        self.elements.append(element)
        if tag not in self.VOID:
            self.open.append(element)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1]["tag"] == tag, f"unbalanced </{tag}>"
        self.open.pop()

    def handle_data(self, data):
        if self.open:
            self.open[-1]["text"] += data

    def of_class(self, name):
        return [e for e in self.elements if e["attrs"].get("class") == name]

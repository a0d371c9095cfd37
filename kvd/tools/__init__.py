"""Programs that come with kvd besides the server: ``kvd-load-rdb`` (``load_rdb.py``)."""

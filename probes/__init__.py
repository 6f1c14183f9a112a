"""Scripts that run ON the machine under test (stdlib + torch only); they import nothing of regdiag."""

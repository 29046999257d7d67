"""placeholder"""

def register():
    pass


def unregister():
    pass
